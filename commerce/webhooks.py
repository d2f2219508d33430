"""Provider notifications: Stripe's signed webhooks settle steps, as a lookup would.

A signature proves who sent an event, not that it is about what it names. And the web
server's database role may store an event but settle nothing (docs/design.md §4): so an event
is received by the web server and applied by a worker (agentops/provider_events.py).

Received (:func:`stripe_event_receive`, the view):

1. checked on the raw body, which is at most ``MAX_BODY_BYTES`` (a larger one is refused
   413 by the view before it is read): Stripe's signature, and its timestamp within
   ``TOLERANCE_SECONDS`` of now *either way* (``stripe.Webhook.construct_event`` only
   refuses one too old; a signature dated ahead would stay replayable until then). A web
   server given no secret on purpose (``STRIPE_WEBHOOK_CHECKED_BY_WORKERS``) checks only
   that a signature is there, and leaves the check to the workers: then even a web server
   taken over cannot sign an event;
2. parsed strictly: a body that is not a JSON object, is nested deeper than ``MAX_DEPTH``, or
   whose ``data.object`` is missing or malformed is refused (400) with nothing changed.
   ``construct_event`` is not used for this: it parses any JSON value to any depth and fails
   on a body that is not an object with exceptions of its own (500s);
3. stored once by its id, as received (``store_provider_event``), and a worker rung for it;
   a delivery again is answered "duplicate".

Applied (:func:`stripe_event_apply`, a worker): the signature checked again, with the
worker's secret, on the body as stored, dated within the tolerance of when it was received;
the body parsed again (never trusting what was stored beside it); then an explicit table of
handlers. An event settles a step only when it is the right kind of event for that step's
tool and its amount, currency and invoice (or payment) match the step's frozen arguments;
otherwise it is recorded as a conflict on the task, which then needs a human, and the step
is left as it was. Settling goes through ``journal.settle.step_settle``: duplicates and late
or out-of-order events change nothing, and ``done`` never moves back. Only the fields the
journal needs are kept; the body is emptied once applied (a PaymentIntent carries its
``client_secret``). A failure while applying rolls it all back: the sweeper rings again.

Each delivery is counted once by what became of it (``agentops_webhook_events_total``:
applied, unchanged, conflict, ignored, duplicate, refused, failed): the view counts what it
refuses, what fails and a duplicate; the worker what applying an event did.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, overload

import stripe
from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now

from agentops import effects
from agentops.effects import (
    EntryKind,
    Outcome,
    Step,
    StepState,
    note,
    provider_event_observed,
    same_object,
    step_by_key,
    step_conflict,
    step_noted,
    step_settle,
    store_provider_event,
    task_ring,
)
from agentops.effects import ProviderEvent as WebhookEvent
from commerce.tools.payments import KEY_FIELD, intent_outcome, refund_outcome

# How far a signature's timestamp may be from now, in the past or in the future.
TOLERANCE_SECONDS = 300
# Stripe's events are a few kilobytes; the body is read before anything proves who sent it.
MAX_BODY_BYTES = 1024 * 1024
# Stripe's events nest fewer than ten levels; json itself gives up (RecursionError) near 1000.
MAX_DEPTH = 32


class WebhookRejected(Exception):
    """The request is not a genuine, well-formed event: answered ``status``, nothing changes."""

    status = 400


class WebhookTooLarge(WebhookRejected):
    """The body is larger than ``MAX_BODY_BYTES``: answered 413 before it is read."""

    status = 413


@dataclass(frozen=True)
class Received:
    event: str
    duplicate: bool
    result: str


# --- Parsing: what the journal needs from an event, and nothing else -------------------------


def _storable(value: str) -> bool:
    """Whether PostgreSQL can hold the text: json.loads makes NUL and lone surrogates from
    ``\\u0000`` and ``\\ud800``, and PostgreSQL stores neither (the event would fail while
    being stored, a 500, and be redelivered for days)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in value


@overload
def _text(obj: Mapping[str, Any], name: str) -> str: ...
@overload
def _text(obj: Mapping[str, Any], name: str, *, optional: bool) -> str | None: ...
def _text(obj: Mapping[str, Any], name: str, *, optional: bool = False) -> str | None:
    value = obj.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value or len(value) > 255 or not _storable(value):
        raise WebhookRejected(f"malformed event: {name} is not a short text")
    return value


def _amount(obj: Mapping[str, Any]) -> int:
    value = obj.get("amount")
    if not isinstance(value, int) or isinstance(value, bool):
        raise WebhookRejected("malformed event: amount is not an integer")
    return value


def _metadata(obj: Mapping[str, Any]) -> dict[str, str]:
    metadata = obj.get("metadata")
    if metadata is None:
        return {}
    if not isinstance(metadata, dict) or not all(
        isinstance(v, str) and _storable(v) for v in metadata.values()
    ):
        raise WebhookRejected("malformed event: metadata is not an object of texts")
    return metadata


def _intent_facts(intent: Mapping[str, Any]) -> dict[str, Any]:
    metadata = _metadata(intent)
    error = intent.get("last_payment_error") or {}
    if not isinstance(error, dict):
        raise WebhookRejected("malformed event: last_payment_error is not an object")
    return {
        "object": "payment_intent",
        "id": _text(intent, "id"),
        "key": metadata.get(KEY_FIELD),
        "invoice": metadata.get("invoice"),
        "amount": _amount(intent),
        "currency": _text(intent, "currency"),
        "status": _text(intent, "status"),
        "latest_charge": _text(intent, "latest_charge", optional=True),
        "last_payment_error": {
            k: error[k]
            for k in ("code", "decline_code")
            if isinstance(error.get(k), str) and _storable(error[k])
        },
    }


def _refund_facts(refund: Any) -> dict[str, Any]:
    if not isinstance(refund, dict):
        raise WebhookRejected("malformed event: a refund is not an object")
    return {
        "id": _text(refund, "id"),
        "key": _metadata(refund).get(KEY_FIELD),
        "payment_intent": _text(refund, "payment_intent", optional=True),
        "amount": _amount(refund),
        "currency": _text(refund, "currency", optional=True),
        "status": _text(refund, "status"),
        "failure_reason": _text(refund, "failure_reason", optional=True),
    }


def _charge_facts(charge: Mapping[str, Any]) -> dict[str, Any]:
    refunds = charge.get("refunds") or {}
    listed = refunds.get("data") if isinstance(refunds, dict) else None
    if not isinstance(listed, list):
        raise WebhookRejected("malformed event: refunds.data is not a list")
    return {
        "object": "charge",
        "id": _text(charge, "id"),
        "payment_intent": _text(charge, "payment_intent", optional=True),
        "amount": _amount(charge),
        "refunds": [_refund_facts(r) for r in listed],
    }


PARSERS: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "payment_intent.succeeded": _intent_facts,
    "payment_intent.payment_failed": _intent_facts,
    "charge.refunded": _charge_facts,
}


def _parse(body: Mapping[str, Any]) -> dict[str, Any]:
    """The facts of an event the handlers need; :class:`WebhookRejected` if it is malformed."""
    parse = PARSERS.get(body["type"])
    if parse is None:
        return {}
    data = body.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("object"), dict):
        raise WebhookRejected("malformed event: data.object is missing or not an object")
    return parse(data["object"])


# --- Applying: an event settles a step only when it proves it is about that step -----------


@dataclass(frozen=True)
class Event:
    id: str
    type: str
    facts: dict[str, Any]


@dataclass(frozen=True)
class Applied:
    """What applying an event (or one of its reports) did, as counted, and in a sentence."""

    outcome: str
    """``applied`` (it settled a step), ``unchanged`` (the step had settled so already, or
    the report is not final), ``conflict`` or ``ignored`` (about no step of ours)."""
    result: str


# An event of several reports (a charge's refunds) is counted by the weightiest of them.
WEIGHT = {"conflict": 3, "applied": 2, "unchanged": 1, "ignored": 0}


def _combined(applied: list[Applied]) -> Applied:
    if not applied:
        return Applied("ignored", "ignored: no refunds listed")
    outcome = max((a.outcome for a in applied), key=WEIGHT.__getitem__)
    return Applied(outcome, "; ".join(a.result for a in applied))


def _differences(step: Step, tool: str, expected: Mapping[str, Any]) -> list[str]:
    """How the event's object differs from the step it names (empty when it matches)."""
    if step.tool != tool:
        return [f"it names a {step.tool or step.kind} step, not a {tool} step"]
    problems = []
    for arg, value in expected.items():
        frozen = step.args.get(arg)
        if value is None and frozen is None:
            continue
        same = (
            same_object(value, frozen)
            if isinstance(value, str) and isinstance(frozen, str)
            else value == frozen
        )
        if not same:
            problems.append(f"{arg} {value!r} is not the step's {frozen!r}")
    return problems


def _apply(
    event: Event, key: str | None, tool: str, expected: Mapping[str, Any], outcome: Outcome
) -> Applied:
    if not key:
        return Applied("ignored", "ignored: not an agentops effect")
    step = step_by_key(key=key)
    if step is None:
        return Applied("ignored", f"ignored: no step {key}")
    received = note(EntryKind.WEBHOOK_RECEIVED, actor="stripe", event=event.id, type=event.type)
    problems = _differences(step, tool, expected)
    if problems:
        reason = (
            f"a {event.type} event ({event.id}) names step {key} but does not match it: "
            f"{'; '.join(problems)}; the step was left as it was"
        )
        step_conflict(
            step=step,
            reason=reason,
            via=f"webhook {event.type}",
            actor="stripe",
            notes=[received],
            event=event.id,
        )
        return Applied("conflict", f"conflict on {key}: {'; '.join(problems)}")
    if outcome.state == StepState.UNKNOWN:
        step_noted(step_id=step.pk, notes=[received])
        return Applied("unchanged", f"noted: {key} is not final at the provider")
    changed = step_settle(
        step_id=step.pk,
        outcome=outcome,
        via=f"webhook {event.type}",
        notes=[received],
        actor="stripe",
    )
    if changed:
        # The task may go on now: ring for its runner once this is committed.
        task_id = step.task_id
        transaction.on_commit(lambda: task_ring(task_id=task_id))
        return Applied("applied", f"settled {key} {outcome.state}")
    # Not changed: a repeat of what the journal says, or (settled otherwise) a contradiction
    # step_settle recorded as a conflict on the task.
    state = Step.objects.filter(pk=step.pk).values_list("state", flat=True).first()
    if state != outcome.state:
        return Applied("conflict", f"conflict on {key}: it is {state}, reported {outcome.state}")
    return Applied("unchanged", f"unchanged {key} {outcome.state}")


def _payment_intent(event: Event) -> Applied:
    intent = event.facts
    outcome = intent_outcome(intent)
    expected_state = (
        StepState.DONE if event.type == "payment_intent.succeeded" else StepState.NOT_DONE
    )
    if outcome.state != expected_state:
        # Not a report of the outcome its type names (a succeeded event about an intent that
        # is still processing): nothing to settle from it.
        return Applied(
            "ignored", f"ignored: a {event.type} event about a payment that is {intent['status']}"
        )
    expected = {
        "amount": intent["amount"],
        "currency": intent["currency"],
        "invoice": intent["invoice"],
    }
    return _apply(event, intent["key"], "charge_customer", expected, outcome)


def _charge_refunded(event: Event) -> Applied:
    results = []
    for refund in event.facts["refunds"]:
        expected: dict[str, Any] = {"payment_intent": refund["payment_intent"]}
        step = step_by_key(key=refund["key"]) if refund["key"] else None
        if step is not None and step.args.get("amount") is not None:
            expected["amount"] = refund["amount"]
        results.append(
            _apply(event, refund["key"], "refund_charge", expected, refund_outcome(refund))
        )
    return _combined(results)


HANDLERS: dict[str, Callable[[Event], Applied]] = {
    "payment_intent.succeeded": _payment_intent,
    "payment_intent.payment_failed": _payment_intent,
    "charge.refunded": _charge_refunded,
}


def _signed_at(signature: str) -> int:
    """The timestamp a verified ``Stripe-Signature`` covers: its first ``t=``, read exactly as
    ``stripe.WebhookSignature`` reads it (so it is the one the signature was checked with)."""
    items = [item.split("=", 2) for item in signature.split(",")]
    return int([item[1] for item in items if item[0] == "t"][0])


def _verify(text: str, signature: str, *, now: float) -> None:
    """Nothing, once ``signature`` is Stripe's over ``text`` and was made within
    ``TOLERANCE_SECONDS`` of ``now``, before or after; :class:`WebhookRejected` if not."""
    if not settings.STRIPE_WEBHOOK_SECRET:
        raise WebhookRejected("STRIPE_WEBHOOK_SECRET is not set; no event can be verified")
    if not signature:
        raise WebhookRejected("bad signature: there is no Stripe-Signature header")
    try:
        # The timestamp is checked below, both ways, in one place.
        stripe.WebhookSignature.verify_header(
            text, signature, settings.STRIPE_WEBHOOK_SECRET, tolerance=None
        )
    except stripe.SignatureVerificationError as exc:
        raise WebhookRejected(f"bad signature: {exc.user_message or exc}") from exc
    skew = now - _signed_at(signature)
    if abs(skew) > TOLERANCE_SECONDS:
        when = "in the past" if skew > 0 else "in the future"
        raise WebhookRejected(
            f"bad signature: it was made {abs(skew):.0f} s {when}, "
            f"more than the {TOLERANCE_SECONDS} s allowed"
        )


def _text_of(payload: bytes) -> str:
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WebhookRejected("malformed event: the body is not UTF-8") from exc


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests objects or arrays more than ``limit`` levels (breadth first,
    without recursion)."""
    level = [value] if isinstance(value, dict | list) else []
    for _ in range(limit):
        level = [
            child
            for container in level
            for child in (container.values() if isinstance(container, dict) else container)
            if isinstance(child, dict | list)
        ]
        if not level:
            return False
    return True


def _decode(text: str) -> dict[str, Any]:
    """The event as a JSON object no deeper than ``MAX_DEPTH``; :class:`WebhookRejected` if
    it is anything else."""
    try:
        body = json.loads(text)
    except RecursionError:
        raise WebhookRejected(f"malformed event: nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise WebhookRejected(f"malformed event: {exc}") from exc
    if not isinstance(body, dict):
        raise WebhookRejected(f"malformed event: a JSON {type(body).__name__}, not an object")
    if _deeper_than(body, MAX_DEPTH):
        raise WebhookRejected(f"malformed event: nested deeper than {MAX_DEPTH} levels")
    return body


def stripe_event_receive(*, payload: bytes, signature: str) -> Received:
    """Check, parse and store once, for a worker to apply (the web server's part). Raises
    :class:`WebhookRejected` for anything that is not a genuine (where this process can tell),
    well-formed event. A duplicate is counted once committed; what it refuses or fails with,
    by its caller; what applying it does, by the worker."""
    text = _text_of(payload)
    if not settings.STRIPE_WEBHOOK_CHECKED_BY_WORKERS:
        _verify(text, signature, now=time.time())
    elif not signature:
        raise WebhookRejected("bad signature: there is no Stripe-Signature header")
    body = _decode(text)
    event = Event(id=_text(body, "id"), type=_text(body, "type")[:100], facts=_parse(body))
    with transaction.atomic():
        stored = store_provider_event(
            provider="stripe", event_id=event.id, type=event.type, payload=text, signature=signature
        )
        if not stored:
            provider_event_observed(provider="stripe", outcome="duplicate")
            return Received(event=event.id, duplicate=True, result="duplicate: already received")
    return Received(event=event.id, duplicate=False, result="received: a worker applies it")


@effects.register_event_applier("stripe")
def stripe_event_apply(event_id: str) -> str:
    """Verify the stored event with this worker's secret and apply it, once (a worker's
    part): what it did, in a sentence. An event applied already is left alone; one whose
    signature does not hold settles nothing and says why."""
    with transaction.atomic():
        stored = (
            WebhookEvent.objects.select_for_update()
            .filter(pk=event_id, provider="stripe", applied_at__isnull=True)
            .first()
        )
        if stored is None:
            return "applied already, or never stored"
        try:
            _verify(stored.payload, stored.signature, now=stored.received_at.timestamp())
            body = _decode(stored.payload)
            if body.get("id") != stored.id:
                raise WebhookRejected("malformed event: its id is not the one it was stored by")
            event = Event(id=stored.id, type=_text(body, "type")[:100], facts=_parse(body))
        except WebhookRejected as exc:
            applied, facts = Applied("refused", f"refused: {exc}"), {}
        else:
            handler = HANDLERS.get(event.type)
            applied = handler(event) if handler else Applied("ignored", "ignored: type not handled")
            facts = event.facts
        WebhookEvent.objects.filter(pk=stored.pk).update(
            result=applied.result[:5000], facts=facts, payload="", applied_at=Now()
        )
        provider_event_observed(provider="stripe", outcome=applied.outcome)
    return applied.result
