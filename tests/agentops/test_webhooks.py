"""POST /webhooks/stripe: genuine events settle steps; anything else changes nothing."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import OperationalError
from django.test import AsyncRequestFactory, Client, override_settings

from agentops.models import WebhookEvent
from agentops.operators.services import task_resume
from agentops.provider_events import provider_event_apply, provider_events_sweep
from commerce.views import stripe_webhook
from commerce.webhooks import MAX_BODY_BYTES, MAX_DEPTH, TOLERANCE_SECONDS
from journal.leases import lease_acquire, lease_release
from journal.models import Entry, EntryKind, Step, Task
from journal.outcomes import Outcome
from journal.protocols import Call, Finish
from journal.record import step_record, task_create, task_finish
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


@dataclass
class Delivered:
    """A delivery to POST /webhooks/stripe, and what a worker's application of the event it
    stored did (the web server stores; a worker applies: commerce/webhooks.py)."""

    received: Any
    applied: str | None

    @property
    def status_code(self) -> int:
        return int(self.received.status_code)

    @property
    def content(self) -> bytes:
        return bytes(self.received.content)

    def json(self) -> dict[str, Any]:
        body = dict(self.received.json())
        return {**body, "result": self.applied} if self.applied is not None else body


def post(payload: bytes, signature: str, *, apply: bool = True) -> Delivered:
    """Deliver the event, then apply what was stored, as the worker rung for it would."""
    response = Client().post(
        "/webhooks/stripe",
        data=payload,
        content_type="application/json",
        headers={"Stripe-Signature": signature},
    )
    applied = None
    if apply and response.status_code == 200 and not response.json()["duplicate"]:
        applied = provider_event_apply(provider="stripe", event_id=response.json()["event"])
    return Delivered(response, applied)


def pending_step(tool: str = "charge_customer", **args: Any) -> Step:
    """A charge in flight, as the runner leaves it while it waits for the provider."""
    task = task_create(kind="renewal", goal="charge")
    lease = lease_acquire(task_id=task.pk, owner="webhook-test")
    assert lease is not None
    decision = Call(tool, {"invoice": invoice(), "amount": 4900, "currency": "usd", **args})
    step = step_record(
        lease=lease, decision=decision, tools={tool: ChargeTool(Provider(), name=tool)}
    )
    lease_release(lease)  # its runner waits for the provider, or died: the step stays open
    return step


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
def test_forged_or_stale_events_are_refused_and_change_nothing(
    forge: Any, caplog: pytest.LogCaptureFixture
) -> None:
    step = pending_step()
    payload = event("payment_intent.succeeded", step, status="succeeded")
    refused(post(payload, forge(payload)), caplog, status=400, says="bad signature")
    step.refresh_from_db()
    assert step.state == "pending"
    assert not WebhookEvent.objects.filter(id=json.loads(payload)["id"]).exists()


@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_a_malformed_but_signed_body_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    for payload in (b"{not json", b"\xff\xfe{}"):
        caplog.clear()
        refused(post(payload, sign(payload)), caplog, status=400, says="malformed event")


@override_settings(STRIPE_WEBHOOK_SECRET="")
def test_without_a_configured_secret_nothing_is_accepted(caplog: pytest.LogCaptureFixture) -> None:
    payload = event("payment_intent.succeeded", "ao:x:1", status="succeeded")
    refused(post(payload, sign(payload)), caplog, status=400, says="STRIPE_WEBHOOK_SECRET")


@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_events_for_effects_agentops_did_not_make_are_stored_and_ignored() -> None:
    payload = event("payment_intent.succeeded", "ao:not-a-task:1", status="succeeded")
    response = post(payload, sign(payload))
    assert response.status_code == 200
    assert response.json()["result"].startswith("ignored")


def test_only_post_is_allowed() -> None:
    assert Client().get("/webhooks/stripe").status_code == 405


# --- Events prove what they settle (issue 7) -------------------------------------------------


def _conflicted(step: Step) -> None:
    """The step was left as it was; the task shows a conflict needing a human."""
    fresh = Step.objects.select_related("task").get(pk=step.pk)
    assert fresh.state == step.state
    assert fresh.task.status == "needs_human" and fresh.task.attention_code == "conflict"
    assert Entry.objects.filter(step=step, kind=EntryKind.CONFLICT).count() == 1


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"amount": 99999}, "amount 99999 is not the step's 4900"),
        ({"currency": "eur"}, "currency 'eur' is not the step's 'usd'"),
        ({"metadata": None}, "ignored"),  # no key: not ours, nothing to match
    ],
)
@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_a_signed_event_that_does_not_match_its_step_is_a_conflict_not_a_settlement(
    change: dict[str, Any], complaint: str
) -> None:
    step = pending_step()
    payload = event("payment_intent.succeeded", step, status="succeeded", **change)
    response = post(payload, sign(payload))
    assert response.status_code == 200 and complaint in response.json()["result"]
    if complaint == "ignored":
        assert Step.objects.get(pk=step.pk).state == "pending"
        return
    _conflicted(step)


@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_an_event_for_another_invoice_is_a_conflict() -> None:
    step = pending_step()
    body = json.loads(event("payment_intent.succeeded", step, status="succeeded"))
    body["data"]["object"]["metadata"]["invoice"] = "INV-SOMEONE-ELSE"
    payload = json.dumps(body).encode()
    assert "invoice 'INV-SOMEONE-ELSE'" in post(payload, sign(payload)).json()["result"]
    _conflicted(step)


@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_a_payment_event_naming_an_email_step_is_a_conflict() -> None:
    step = pending_step("send_email")
    payload = event("payment_intent.succeeded", step, status="succeeded")
    result = post(payload, sign(payload)).json()["result"]
    assert "names a send_email step, not a charge_customer step" in result
    _conflicted(step)


@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_a_conflict_on_a_finished_task_hands_it_to_a_human() -> None:
    step = pending_step()
    step_settle(step_id=step.pk, outcome=Outcome.done({"payment_intent": "pi_x"}), via="lookup")
    lease = lease_acquire(task_id=step.task_id, owner="finisher")
    assert lease is not None
    task_finish(lease=lease, decision=Finish("done"), summary="1 done.")
    payload = event("payment_intent.succeeded", step, status="succeeded", amount=1)
    assert post(payload, sign(payload)).status_code == 200
    task = Task.objects.get(pk=step.task_id)
    assert task.status == "needs_human" and task.attention_code == "conflict"
    # An operator who checked it lets it be finished again (recorded with who and why).
    assert task_resume(task_id=task.pk, actor="ops@example.com", reason="checked") == "finished"


def refund_event(step: Step, *, status: str, **change: Any) -> bytes:
    refund = {
        "id": f"re_{secrets.token_hex(6)}",
        "object": "refund",
        "payment_intent": step.args.get("payment_intent"),
        "amount": step.args.get("amount", 4900),
        "currency": "usd",
        "status": status,
        "metadata": {"agentops_key": step.key},
        **change,
    }
    charge = {
        "id": f"ch_{secrets.token_hex(6)}",
        "object": "charge",
        "payment_intent": refund["payment_intent"],
        "amount": 4900,
        "refunds": {"object": "list", "data": [refund]},
    }
    body = {
        "id": f"evt_{secrets.token_hex(8)}",
        "object": "event",
        "type": "charge.refunded",
        "created": int(time.time()),
        "data": {"object": charge},
    }
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("status", "state"),
    [
        ("succeeded", "done"),
        ("failed", "not_done"),
        ("pending", "pending"),
        ("canceled", "not_done"),
    ],
)
@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_refund_statuses_map_to_three_states_as_the_lookup_maps_them(
    status: str, state: str
) -> None:
    step = pending_step("refund_charge", payment_intent=f"pi_{secrets.token_hex(6)}")
    payload = refund_event(step, status=status)
    assert post(payload, sign(payload)).status_code == 200
    assert Step.objects.get(pk=step.pk).state == state


@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_a_refund_event_for_another_payment_is_a_conflict() -> None:
    step = pending_step("refund_charge", payment_intent="pi_mine")
    payload = refund_event(step, status="succeeded", payment_intent="pi_theirs")
    assert "payment_intent 'pi_theirs'" in post(payload, sign(payload)).json()["result"]
    _conflicted(step)


@pytest.mark.parametrize(
    "spoil",
    [
        pytest.param(lambda b: b.pop("data"), id="no-data"),
        pytest.param(lambda b: b.update(data="oops"), id="data-not-an-object"),
        pytest.param(lambda b: b["data"].update(object=[1]), id="object-not-an-object"),
        pytest.param(lambda b: b["data"]["object"].update(amount="4900"), id="amount-a-text"),
        pytest.param(lambda b: b["data"]["object"].update(metadata=[]), id="metadata-a-list"),
        pytest.param(lambda b: b["data"]["object"].pop("id"), id="no-object-id"),
    ],
)
@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_a_well_signed_but_malformed_event_is_a_400_and_changes_nothing(
    spoil: Any, caplog: pytest.LogCaptureFixture
) -> None:
    step = pending_step()
    body = json.loads(event("payment_intent.succeeded", step, status="succeeded"))
    spoil(body)
    payload = json.dumps(body).encode()
    refused(post(payload, sign(payload)), caplog, status=400, says="malformed event")
    assert not WebhookEvent.objects.filter(id=body["id"]).exists()
    assert Step.objects.get(pk=step.pk).state == "pending"
    assert not Entry.objects.filter(step=step, kind=EntryKind.WEBHOOK_RECEIVED).exists()


@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_a_failure_while_applying_leaves_the_event_stored_and_the_sweeper_applies_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import commerce.webhooks
    import journal.settle

    step = pending_step()
    payload = event("payment_intent.succeeded", step, status="succeeded")
    event_id = json.loads(payload)["id"]
    real_settle = journal.settle.step_settle

    def broken(**kwargs: Any) -> bool:
        raise OperationalError("the database went away mid-event")

    monkeypatch.setattr(commerce.webhooks, "step_settle", broken)
    received = post(payload, sign(payload), apply=False)
    assert received.status_code == 200 and received.json()["event"] == event_id
    with pytest.raises(OperationalError):
        provider_event_apply(provider="stripe", event_id=event_id)
    stored = WebhookEvent.objects.get(id=event_id)
    assert stored.applied_at is None and stored.payload  # kept, as received, to try again
    assert Step.objects.get(pk=step.pk).state == "pending"
    # Stripe's redelivery is a duplicate: what was stored is what is applied.
    assert post(payload, sign(payload)).json()["duplicate"] is True

    monkeypatch.setattr(commerce.webhooks, "step_settle", real_settle)
    with override_settings(SWEEP_GRACE_SECONDS=0):
        assert provider_events_sweep() >= 1  # rung again
    assert "settled" in provider_event_apply(provider="stripe", event_id=event_id)
    assert Step.objects.get(pk=step.pk).state == "done"
    assert provider_event_apply(provider="stripe", event_id=event_id).startswith("applied already")


@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_an_event_stored_by_anyone_but_the_provider_settles_nothing() -> None:
    """The web server's role may store events (that is its part), and so may whoever holds
    its credentials: the worker verifies the signature itself, from the body as stored, and
    what the provider did not sign settles nothing."""
    step = pending_step()
    forged = event("payment_intent.succeeded", step, status="succeeded")
    event_id = json.loads(forged)["id"]
    WebhookEvent.objects.create(
        id=event_id,
        provider="stripe",
        type="payment_intent.succeeded",
        payload=forged.decode(),
        signature=sign(forged, secret="whsec_" + "x" * 32),
    )
    said = provider_event_apply(provider="stripe", event_id=event_id)
    assert said.startswith("refused: bad signature")
    assert Step.objects.get(pk=step.pk).state == "pending"
    assert WebhookEvent.objects.get(id=event_id).payload == ""


def test_a_web_server_without_the_secret_stores_what_the_worker_then_refuses() -> None:
    """Given no STRIPE_WEBHOOK_SECRET on purpose (STRIPE_WEBHOOK_CHECKED_BY_WORKERS), the web
    server cannot sign an event even if it is taken over: it stores what is well-formed and
    signed at all, and the worker, which has the secret, verifies it."""
    step = pending_step()
    genuine = event("payment_intent.succeeded", step, status="succeeded")
    forged = event("payment_intent.succeeded", step, status="succeeded")
    with override_settings(STRIPE_WEBHOOK_SECRET="", STRIPE_WEBHOOK_CHECKED_BY_WORKERS=True):
        first = post(forged, sign(forged, secret="whsec_" + "y" * 32), apply=False)
        second = post(genuine, sign(genuine), apply=False)
        unsigned = Client().post("/webhooks/stripe", data=genuine, content_type="application/json")
        assert unsigned.status_code == 400
    assert first.status_code == second.status_code == 200
    with override_settings(STRIPE_WEBHOOK_SECRET=SECRET):
        said = provider_event_apply(provider="stripe", event_id=first.json()["event"])
        assert said.startswith("refused: bad signature")
        assert Step.objects.get(pk=step.pk).state == "pending"
        provider_event_apply(provider="stripe", event_id=second.json()["event"])
    assert Step.objects.get(pk=step.pk).state == "done"


@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_only_what_the_journal_needs_is_stored_never_the_client_secret() -> None:
    step = pending_step()
    payload = event("payment_intent.succeeded", step, status="succeeded")
    assert post(payload, sign(payload)).status_code == 200
    stored = WebhookEvent.objects.get(id=json.loads(payload)["id"])
    assert stored.facts["key"] == step.key and stored.facts["amount"] == 4900
    assert "client_secret" not in json.dumps(stored.facts)
    assert stored.payload == "" and stored.applied_at is not None  # emptied once applied


# --- What an outsider can send (issue 15) ------------------------------------------------------
#
# Every refusal says why in a short sentence, keeps nothing, and logs one warning line without
# a traceback; a body too large is refused before it is read.


class Body(io.RawIOBase):
    """A request body made on demand that counts what the server read of it."""

    def __init__(self, size: int, fill: bytes = b" ") -> None:
        self.size, self.fill, self.taken = size, fill, 0

    def __len__(self) -> int:
        return self.size

    def readable(self) -> bool:
        return True

    def read(self, n: int | None = -1) -> bytes:
        n = self.size - self.taken if n is None or n < 0 else min(n, self.size - self.taken)
        self.taken += n
        return self.fill * n

    def readline(self, *args: Any) -> bytes:
        return self.read(*args)


def refused(response: Any, caplog: pytest.LogCaptureFixture, *, status: int, says: str) -> str:
    """The response refuses with ``status`` and a short reason, logged once, no traceback."""
    assert response.status_code == status, response.content
    reason = json.loads(response.content)["error"]
    assert says in reason and len(reason) < 200, reason
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert says in warnings[0].getMessage() and "\n" not in warnings[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)
    return str(reason)


@pytest.mark.parametrize(
    "size",
    [
        pytest.param(MAX_BODY_BYTES + 1, id="just-over"),
        # Over Django's own limit too: reading request.body raised RequestDataTooBig (a 500).
        pytest.param(django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1, id="over-django-limit"),
        pytest.param(10**12, id="a-terabyte-declared"),
    ],
)
@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_a_body_over_the_limit_is_a_413_before_a_byte_is_read(
    size: int, caplog: pytest.LogCaptureFixture
) -> None:
    stored = WebhookEvent.objects.count()
    body = Body(size)
    environ: dict[str, Any] = {"wsgi.input": body, "CONTENT_LENGTH": str(size)}
    response = Client().generic(
        "POST", "/webhooks/stripe", headers={"Stripe-Signature": sign(b"")}, **environ
    )
    refused(response, caplog, status=413, says="too large")
    assert body.taken == 0
    assert WebhookEvent.objects.count() == stored


@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_a_body_of_no_declared_length_is_read_only_to_one_byte_past_the_limit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Chunked, under ASGI: no Content-Length, and the server hands the view the whole stream.
    body = Body(50 * MAX_BODY_BYTES)
    request = AsyncRequestFactory().request(
        method="POST",
        path="/webhooks/stripe",
        headers=[(b"stripe-signature", sign(b"").encode())],
        _body_file=body,
    )
    assert "CONTENT_LENGTH" not in request.META
    response = stripe_webhook(request)
    refused(response, caplog, status=413, says="too large")
    assert body.taken == MAX_BODY_BYTES + 1


@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_a_genuine_event_of_exactly_the_limit_is_applied() -> None:
    step = pending_step()
    payload = event("payment_intent.succeeded", step, status="succeeded")
    payload += b" " * (MAX_BODY_BYTES - len(payload))
    assert post(payload, sign(payload)).status_code == 200
    assert Step.objects.get(pk=step.pk).state == "done"


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"[]", id="array"),
        pytest.param(b'[{"id": "evt_1", "type": "payment_intent.succeeded"}]', id="array-of-one"),
        pytest.param(b'"evt_1"', id="string"),
        pytest.param(b"42", id="number"),
        pytest.param(b"null", id="null"),
        pytest.param(b"true", id="true"),
    ],
)
@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_a_signed_body_that_is_not_a_json_object_is_a_400(
    payload: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    stored = WebhookEvent.objects.count()
    refused(post(payload, sign(payload)), caplog, status=400, says="malformed event")
    assert WebhookEvent.objects.count() == stored


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize(
    "payload",
    [
        # Deep enough that json raises RecursionError.
        pytest.param(nested(100_000).encode(), id="100k-arrays"),
        pytest.param(('{"a": ' * 100_000 + "1" + "}" * 100_000).encode(), id="100k-objects"),
    ],
)
@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_a_signed_body_nested_beyond_reason_is_a_400(
    payload: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    stored = WebhookEvent.objects.count()
    refused(post(payload, sign(payload)), caplog, status=400, says="malformed event")
    assert WebhookEvent.objects.count() == stored


@pytest.mark.parametrize(("extra_levels", "applied"), [(MAX_DEPTH - 1, True), (MAX_DEPTH, False)])
@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_an_event_nested_deeper_than_the_limit_is_malformed(
    extra_levels: int, applied: bool, caplog: pytest.LogCaptureFixture
) -> None:
    step = pending_step()
    body = json.loads(event("payment_intent.succeeded", step, status="succeeded"))
    # The event itself is one level; a field holding n nested arrays adds n.
    body["padding"] = json.loads(nested(extra_levels))
    payload = json.dumps(body).encode()
    response = post(payload, sign(payload))
    if applied:
        assert response.status_code == 200 and Step.objects.get(pk=step.pk).state == "done"
        return
    refused(response, caplog, status=400, says=f"nested deeper than {MAX_DEPTH} levels")
    assert Step.objects.get(pk=step.pk).state == "pending"
    assert not WebhookEvent.objects.filter(id=body["id"]).exists()


@pytest.mark.parametrize(
    ("offset", "says"),
    [
        pytest.param(-(TOLERANCE_SECONDS + 1), "in the past", id="past"),
        pytest.param(TOLERANCE_SECONDS + 1, "in the future", id="future"),
        pytest.param(365 * 24 * 3600, "in the future", id="a-year-ahead"),
    ],
)
@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_a_signature_dated_outside_the_tolerance_either_way_is_refused(
    offset: int, says: str, caplog: pytest.LogCaptureFixture
) -> None:
    step = pending_step()
    payload = event("payment_intent.succeeded", step, status="succeeded")
    response = post(payload, sign(payload, at=int(time.time()) + offset))
    refused(response, caplog, status=400, says=says)
    assert Step.objects.get(pk=step.pk).state == "pending"
    assert not WebhookEvent.objects.filter(id=json.loads(payload)["id"]).exists()


@pytest.mark.parametrize("offset", [-(TOLERANCE_SECONDS - 60), TOLERANCE_SECONDS - 60])
@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_a_signature_dated_within_the_tolerance_either_way_is_accepted(offset: int) -> None:
    step = pending_step()
    payload = event("payment_intent.succeeded", step, status="succeeded")
    assert post(payload, sign(payload, at=int(time.time()) + offset)).status_code == 200
    assert Step.objects.get(pk=step.pk).state == "done"


@pytest.mark.parametrize(
    "spoil",
    [
        pytest.param(lambda b: b.update(id="evt_\u0000"), id="nul-in-event-id"),
        pytest.param(lambda b: b.update(id="evt_\ud800"), id="lone-surrogate-in-event-id"),
        pytest.param(lambda b: b.update(type="payment_intent.\u0000"), id="nul-in-type"),
        pytest.param(lambda b: b["data"]["object"].update(currency="us\u0000d"), id="nul-in-text"),
        pytest.param(lambda b: b["data"]["object"].update(status="\udfff"), id="surrogate-in-text"),
        pytest.param(
            lambda b: b["data"]["object"]["metadata"].update(invoice="INV-\u0000"),
            id="nul-in-metadata",
        ),
    ],
)
@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_a_signed_event_with_text_postgresql_cannot_hold_is_malformed_not_a_500(
    spoil: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # json.loads makes NUL and lone surrogates from \u0000 and \ud800; PostgreSQL stores
    # neither, so such an event would fail while being stored, and be retried for days.
    step = pending_step()
    body = json.loads(event("payment_intent.succeeded", step, status="succeeded"))
    spoil(body)
    payload = json.dumps(body).encode()
    stored = WebhookEvent.objects.count()
    refused(post(payload, sign(payload)), caplog, status=400, says="malformed event")
    assert WebhookEvent.objects.count() == stored
    assert Step.objects.get(pk=step.pk).state == "pending"
