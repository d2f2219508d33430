"""POST /webhooks/stripe: genuine events settle steps; anything else changes nothing."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from typing import Any

import pytest
from django.test import Client, override_settings

from agentops.models import WebhookEvent
from journal.leases import lease_acquire
from journal.models import Entry, EntryKind, Step, Task
from journal.outcomes import Outcome
from journal.protocols import Call
from journal.record import step_record, task_create
from journal.settle import step_settle
from tests.journal.support import ChargeTool, Provider, invoice

SECRET = "whsec_test_" + "s" * 24
pytestmark = [pytest.mark.usefixtures("committed")]


def sign(payload: bytes, *, secret: str = SECRET, at: int | None = None) -> str:
    """Stripe's scheme: t=<unix>,v1=HMAC-SHA256(secret, "<t>.<payload>")."""
    t = int(time.time()) if at is None else at
    mac = hmac.new(secret.encode(), f"{t}.".encode() + payload, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def event(
    kind: str,
    step: Step | str,
    *,
    status: str,
    event_id: str | None = None,
    **change: Any,
) -> bytes:
    """A PaymentIntent event about ``step`` (matching its frozen arguments unless changed)."""
    args = step.args if isinstance(step, Step) else {"invoice": "INV-1", "amount": 4900}
    intent: dict[str, Any] = {
        "id": f"pi_{secrets.token_hex(6)}",
        "object": "payment_intent",
        "amount": args.get("amount", 4900),
        "currency": args.get("currency", "usd"),
        "status": status,
        "latest_charge": "ch_1" if status == "succeeded" else None,
        "metadata": {
            "agentops_key": step.key if isinstance(step, Step) else step,
            "invoice": args.get("invoice"),
        },
        "last_payment_error": None if status == "succeeded" else {"code": "card_declined"},
        "client_secret": f"pi_secret_{secrets.token_hex(8)}",
        **change,
    }
    body = {
        "id": event_id or f"evt_{secrets.token_hex(8)}",
        "object": "event",
        "type": kind,
        "api_version": "2025-01-27.acacia",
        "created": int(time.time()),
        "livemode": False,
        "data": {"object": intent},
    }
    return json.dumps(body).encode()


def post(payload: bytes, signature: str) -> Any:
    return Client().post(
        "/webhooks/stripe",
        data=payload,
        content_type="application/json",
        headers={"Stripe-Signature": signature},
    )


def pending_step(tool: str = "charge_customer", **args: Any) -> Step:
    """A charge in flight, as the runner leaves it while it waits for the provider."""
    task = task_create(kind="renewal", goal="charge")
    lease = lease_acquire(task_id=task.pk, owner="webhook-test")
    assert lease is not None
    decision = Call(tool, {"invoice": invoice(), "amount": 4900, "currency": "usd", **args})
    return step_record(
        lease=lease, decision=decision, tools={tool: ChargeTool(Provider(), name=tool)}
    )


@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_a_genuine_success_event_settles_the_step_done() -> None:
    step = pending_step()
    payload = event("payment_intent.succeeded", step, status="succeeded")
    response = post(payload, sign(payload))
    assert response.status_code == 200, response.content
    step.refresh_from_db()
    assert step.state == "done"
    assert step.outcome["evidence"]["payment_intent"].startswith("pi_")
    received = Entry.objects.get(step=step, kind=EntryKind.WEBHOOK_RECEIVED)
    assert received.actor == "stripe" and received.data["event"] == json.loads(payload)["id"]


@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_a_failed_payment_event_settles_the_step_not_done() -> None:
    step = pending_step()
    payload = event("payment_intent.payment_failed", step, status="requires_payment_method")
    assert post(payload, sign(payload)).status_code == 200
    step.refresh_from_db()
    assert step.state == "not_done" and "card_declined" in step.detail


@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_a_duplicate_event_is_acknowledged_and_changes_nothing() -> None:
    step = pending_step()
    payload = event("payment_intent.succeeded", step, status="succeeded")
    assert post(payload, sign(payload)).json()["duplicate"] is False
    entries = Entry.objects.filter(task_id=step.task_id).count()
    again = post(payload, sign(payload))
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert Entry.objects.filter(task_id=step.task_id).count() == entries


@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_done_never_moves_back_on_a_late_contradicting_event() -> None:
    step = pending_step()
    step_settle(step_id=step.pk, outcome=Outcome.done({"payment_intent": "pi_x"}), via="lookup")
    payload = event("payment_intent.payment_failed", step, status="requires_payment_method")
    assert post(payload, sign(payload)).status_code == 200
    step.refresh_from_db()
    assert step.state == "done"
    assert Entry.objects.filter(step=step, kind=EntryKind.CONFLICT).exists()
    assert Task.objects.get(pk=step.task_id).status == "needs_human"


@pytest.mark.parametrize(
    "forge",
    [
        pytest.param(lambda p: sign(p, secret="whsec_wrong"), id="wrong-secret"),
        pytest.param(lambda p: sign(p, at=int(time.time()) - 301), id="stale"),
        pytest.param(lambda p: sign(p + b" "), id="body-changed"),
        pytest.param(lambda p: "", id="no-signature"),
        pytest.param(lambda p: "t=1,v1=deadbeef", id="garbage-signature"),
    ],
)
@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_forged_or_stale_events_are_refused_and_change_nothing(forge: Any) -> None:
    step = pending_step()
    payload = event("payment_intent.succeeded", step, status="succeeded")
    response = post(payload, forge(payload))
    assert response.status_code == 400
    step.refresh_from_db()
    assert step.state == "pending"
    assert not WebhookEvent.objects.filter(id=json.loads(payload)["id"]).exists()


@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_a_malformed_but_signed_body_is_refused() -> None:
    payload = b"{not json"
    response = post(payload, sign(payload))
    assert response.status_code == 400
    assert "malformed" in response.json()["error"]


@override_settings(STRIPE_WEBHOOK_SECRET="")
def test_without_a_configured_secret_nothing_is_accepted() -> None:
    payload = event("payment_intent.succeeded", "ao:x:1", status="succeeded")
    assert post(payload, sign(payload)).status_code == 400


@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_events_for_effects_agentops_did_not_make_are_stored_and_ignored() -> None:
    payload = event("payment_intent.succeeded", "ao:not-a-task:1", status="succeeded")
    response = post(payload, sign(payload))
    assert response.status_code == 200
    assert response.json()["result"].startswith("ignored")


def test_only_post_is_allowed() -> None:
    assert Client().get("/webhooks/stripe").status_code == 405
