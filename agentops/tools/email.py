"""``send_email``: a customer message through the mail provider's HTTP API.

Irreversible: there is no compensation, so sagas place it after every step that may fail.
The step's key is the request's ``Idempotency-Key`` and lives in the ``Message-ID``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from django.conf import settings

from agentops.tools.base import SchemaTool, http_call
from journal.outcomes import Observation, Outcome, Reply


def message_id(key: str) -> str:
    return f"<{key}@agentops>"


class SendEmail(SchemaTool):
    name = "send_email"
    description = "Send an email to a customer (cannot be taken back)."
    schema = {
        "type": "object",
        "properties": {
            "to": {"type": "string", "pattern": "^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$"},
            "subject": {"type": "string", "minLength": 1, "maxLength": 200},
            "body": {"type": "string", "minLength": 1, "maxLength": 20000},
            "reference": {"type": "string", "maxLength": 100},
        },
        "required": ["to", "subject", "body"],
        "additionalProperties": False,
    }

    def __init__(self) -> None:
        self.key_lifetime = timedelta(seconds=settings.MAIL_KEY_LIFETIME_SECONDS)

    def guard(self, args: Mapping[str, Any]) -> str | None:
        # One message of a kind per business reference at a time (one receipt per invoice).
        return f"email:{args['reference']}:{args['subject']}" if args.get("reference") else None

    def call(self, args: Mapping[str, Any], *, key: str) -> Observation:
        seen = http_call(
            "POST",
            f"{settings.MAIL_API_BASE}/v1/messages",
            key=key,
            timeout=self.timeout,
            api_key=settings.MAIL_API_KEY,
            json={
                "to": args["to"],
                "subject": args["subject"],
                "body": args["body"],
                "message_id": message_id(key),
            },
        )
        if isinstance(seen, Reply) and seen.status < 300:
            return Reply(seen.status, evidence=_evidence(seen.evidence))
        return seen

    def lookup(self, args: Mapping[str, Any], *, key: str) -> Outcome | None:
        seen = http_call(
            "GET",
            f"{settings.MAIL_API_BASE}/v1/messages",
            key=None,
            timeout=self.timeout,
            api_key=settings.MAIL_API_KEY,
            params={"message_id": message_id(key)},
        )
        if not isinstance(seen, Reply) or seen.status >= 300:
            raise LookupError(f"the mail provider could not be asked: {seen}")
        found = [m for m in seen.evidence.get("data", []) if m.get("message_id") == message_id(key)]
        return Outcome.done(_evidence(found[0])) if found else None


def _evidence(message: Mapping[str, Any]) -> dict[str, Any]:
    return {"message": message.get("id"), "message_id": message.get("message_id")}
