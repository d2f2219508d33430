"""``send_email``: a customer message through the mail provider's HTTP API.

Irreversible: there is no compensation, so sagas place it after every step that may fail.
The step's key is the request's ``Idempotency-Key`` and lives in the ``Message-ID``.

A message names its purpose and the business reference it is about; together they are the
object it acts on, so a receipt for INV-2291, an itinerary, or reminder N of an invoice is
sent once however its subject is worded, across tasks and retries.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentops.effects import NO_CONTROL, HttpTool

# A message's purposes, as the model is told them.
PURPOSES = {
    "receipt": "confirms a payment (once per reference)",
    "payment_failed": "says a payment did not go through",
    "itinerary": "confirms a booked trip (once per reference)",
    "reminder": "reminder number N that a reference is overdue (once per reference and N)",
    "notice": "anything else about the reference",
    # Written by the harness alone, as a task's closing call (commerce/kinds.py): no kind
    # lets a model send them.
    "cancellation": "says a booking was cancelled and nothing is owed (once per reference)",
    "refund": "says a payment was refunded",
    "link": "a fresh link to the reference's payment page, which its customer asked for",
}
ONCE_PURPOSES = frozenset({"receipt", "itinerary", "reminder", "cancellation"})
EMAIL_PATTERN = "^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$"


def message_id(key: str) -> str:
    return f"<{key}@agentops>"


def purpose_label(args: Mapping[str, Any]) -> str:
    """``receipt``, ``reminder 2``: a message's purpose, with its number for a reminder."""
    purpose = str(args["purpose"])
    return f"{purpose} {args['reminder']}" if purpose == "reminder" else purpose


class SendEmail(HttpTool):
    name = "send_email"
    description = "Send an email to a customer (cannot be taken back)."
    schema = {
        "type": "object",
        "properties": {
            "to": {"type": "string", "maxLength": 254, "pattern": EMAIL_PATTERN, **NO_CONTROL},
            "subject": {"type": "string", "minLength": 1, "maxLength": 200, **NO_CONTROL},
            "body": {"type": "string", "minLength": 1, "maxLength": 20000},
            "reference": {
                "type": "string",
                "minLength": 1,
                "maxLength": 100,
                **NO_CONTROL,
                "description": "The business reference the message is about (an invoice).",
            },
            "purpose": {
                "enum": list(PURPOSES),
                "description": "What the message is: "
                + "; ".join(f"{k}: {v}" for k, v in PURPOSES.items()),
            },
            "reminder": {
                "type": "integer",
                "minimum": 1,
                "maximum": 100,
                "description": "Which reminder of the reference this is (purpose reminder).",
            },
        },
        "required": ["to", "subject", "body", "reference", "purpose"],
        "additionalProperties": False,
    }

    irreversible = True  # a message read cannot be unread: sagas send it last
    evidence = ("message",)  # the provider's id for the message it accepted
    evidence_fields = {"message": "id"}
    keep = ("message_id",)
    base_setting = "MAIL_API_BASE"
    api_key_setting = "MAIL_API_KEY"
    key_lifetime_setting = "MAIL_KEY_LIFETIME_SECONDS"
    path = "/v1/messages"
    # Found again by its Message-ID, which carries the step's key.
    lookup_path = "/v1/messages"

    def validate(self, args: Mapping[str, Any]) -> list[str]:
        problems = super().validate(args)
        # Said in code, not with if/then in the schema: model APIs take plain schemas best.
        if not problems and (args["purpose"] == "reminder") != ("reminder" in args):
            problems.append("reminder: required when the purpose is reminder, and only then")
        return problems

    def guard(self, args: Mapping[str, Any]) -> str | None:
        number = f":{args['reminder']}" if args["purpose"] == "reminder" else ""
        return f"email:{args['purpose']}{number}:{args['reference']}"

    def once(self, args: Mapping[str, Any]) -> bool:
        return args["purpose"] in ONCE_PURPOSES

    def body(self, args: Mapping[str, Any], *, key: str) -> dict[str, Any]:
        return {
            "to": args["to"],
            "subject": args["subject"],
            "body": args["body"],
            "message_id": message_id(key),
            # What the message is about, on the message itself: whoever reads the provider's
            # records (a person, the chaos run's audit) sees which reminder of which invoice
            # it was, whatever its subject says.
            "headers": {
                "X-Agentops-Reference": args["reference"],
                "X-Agentops-Purpose": purpose_label(args),
            },
        }

    def lookup_query(self, args: Mapping[str, Any], *, key: str) -> dict[str, Any]:
        return {"message_id": message_id(key)}

    def matches(self, found: Mapping[str, Any], *, key: str) -> bool:
        return found.get("message_id") == message_id(key)
