"""Provider notifications: Stripe's signed webhooks settle steps, as a lookup would.

Verified on the raw body (``stripe.Webhook.construct_event``, 300 s tolerance), stored once
by event id, then applied by an explicit table of handlers. Applying goes through
``journal.settle.step_settle``, which is monotone: duplicates and late or out-of-order
events change nothing, and ``done`` never moves back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import stripe
from django.conf import settings
from django.db import IntegrityError, transaction

from agentops.models import WebhookEvent
from agentops.runner import task_ring
from agentops.tools.payments import KEY_FIELD, intent_outcome, refund_evidence
from journal.models import EntryKind
from journal.outcomes import Outcome
from journal.record import entry
from journal.selectors import step_by_key
from journal.settle import step_settle

TOLERANCE_SECONDS = 300


class WebhookRejected(Exception):
    """The request is not a genuine, well-formed event: answered 400, nothing changes."""


@dataclass(frozen=True)
class Received:
    duplicate: bool
    result: str


def _settle(event: Mapping[str, Any], key: str | None, outcome: Outcome) -> str:
    if not key:
        return "ignored: not an agentops effect"
    step = step_by_key(key=key)
    if step is None:
        return f"ignored: no step {key}"
    note = entry(
        kind=EntryKind.WEBHOOK_RECEIVED,
        task_id=step.task_id,
        step_id=step.pk,
        actor="stripe",
        event=event["id"],
        type=event["type"],
    )
    changed = step_settle(
        step_id=step.pk,
        outcome=outcome,
        via=f"webhook {event['type']}",
        extra=[note],
        actor="stripe",
    )
    if changed:
        # The task may go on now: ring for its runner once this is committed.
        task_id = step.task_id
        transaction.on_commit(lambda: task_ring(task_id=task_id))
    return f"{'settled' if changed else 'unchanged'} {key} {outcome.state}"


def _payment_intent(event: Mapping[str, Any]) -> str:
    intent = event["data"]["object"]
    outcome = intent_outcome(intent)
    if outcome.state == "unknown":
        return f"ignored: payment {intent.get('id')} not final"
    return _settle(event, (intent.get("metadata") or {}).get(KEY_FIELD), outcome)


def _charge_refunded(event: Mapping[str, Any]) -> str:
    refunds = ((event["data"]["object"].get("refunds") or {}).get("data")) or []
    results = [
        _settle(event, (r.get("metadata") or {}).get(KEY_FIELD), Outcome.done(refund_evidence(r)))
        for r in refunds
    ]
    return "; ".join(results) or "ignored: no refunds listed"


HANDLERS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "payment_intent.succeeded": _payment_intent,
    "payment_intent.payment_failed": _payment_intent,
    "charge.refunded": _charge_refunded,
}


def stripe_event_receive(*, payload: bytes, signature: str) -> Received:
    """Verify, store once, apply. Raises :class:`WebhookRejected` for anything not genuine."""
    if not settings.STRIPE_WEBHOOK_SECRET:
        raise WebhookRejected("STRIPE_WEBHOOK_SECRET is not set; no event can be verified")
    try:
        event = stripe.Webhook.construct_event(
            payload.decode("utf-8"),
            signature,
            settings.STRIPE_WEBHOOK_SECRET,
            tolerance=TOLERANCE_SECONDS,
        )
    except (ValueError, UnicodeDecodeError) as exc:
        raise WebhookRejected(f"malformed event: {exc}") from exc
    except stripe.SignatureVerificationError as exc:
        raise WebhookRejected(f"bad signature: {exc.user_message or exc}") from exc
    body = event.to_dict()
    if not isinstance(body.get("id"), str) or not isinstance(body.get("type"), str):
        raise WebhookRejected("malformed event: no id or type")
    handler = HANDLERS.get(body["type"])
    try:
        with transaction.atomic():
            stored = WebhookEvent.objects.create(
                id=body["id"], provider="stripe", type=body["type"], payload=body
            )
            # Stored and applied in one transaction: if applying fails, nothing is kept and
            # Stripe's retry finds the event new again.
            stored.result = handler(body) if handler else "ignored: type not handled"
            stored.save(update_fields=["result"])
    except IntegrityError:
        return Received(duplicate=True, result="duplicate: already received")
    return Received(duplicate=False, result=stored.result)
