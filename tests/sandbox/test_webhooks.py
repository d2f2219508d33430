"""Webhooks: signed as Stripe signs them, delivered with delay, duplicates, loss, retries."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import stripe

from tests.sandbox.fixtures import unique, wait_for
from tests.sandbox.test_payments import create

SECRET = "whsec_sandbox_test_secret"


@dataclass
class Receiver:
    url: str
    received: list[tuple[bytes, str]] = field(default_factory=list)
    fail_next: int = 0  # answer 500 to this many deliveries first
    lock: threading.Lock = field(default_factory=threading.Lock)

    def events(self, key: str) -> list[dict[str, Any]]:
        with self.lock:
            items = [json.loads(body) for body, _ in self.received]
        return [
            e
            for e in items
            if e["data"]["object"].get("metadata", {}).get("agentops_key") == key
            or (e.get("request") or {}).get("idempotency_key") == key
        ]


@pytest.fixture
def receiver(payments_sandbox) -> Iterator[Receiver]:
    state: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format, *args):
            pass

        def do_POST(self):
            rec = state["r"]
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with rec.lock:
                failing = rec.fail_next > 0
                if failing:
                    rec.fail_next -= 1
                rec.received.append((body, self.headers.get("Stripe-Signature", "")))
            self.send_response(500 if failing else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    rec = Receiver(url=f"http://127.0.0.1:{server.server_address[1]}/webhooks/stripe")
    state["r"] = rec
    payments_sandbox.client.config(
        webhook_url=rec.url,
        webhook_secret=SECRET,
        webhook_delay=0,
        webhook_duplicate=0,
        webhook_loss=0,
        webhook_reorder=False,
        webhook_retry_delay=0.05,
        webhook_max_attempts=3,
        webhook_seed=1,
    )
    yield rec
    payments_sandbox.client.config(webhook_url=None, webhook_duplicate=0, webhook_loss=0)
    server.shutdown()
    server.server_close()


def test_succeeded_event_is_signed_like_stripe(stripe_sandbox, receiver):
    key = unique()
    pi = create(stripe_sandbox, key)
    wait_for(lambda: receiver.events(key), what="webhook")
    (payload, header), *_ = [
        (b, h) for b, h in receiver.received if json.loads(b)["data"]["object"]["id"] == pi.id
    ]
    event = stripe.Webhook.construct_event(payload.decode(), header, SECRET)
    assert event.type == "payment_intent.succeeded"
    assert event.id.startswith("evt_")
    assert event.data.object.id == pi.id
    assert event.data.object.metadata["agentops_key"] == key
    assert event.request.idempotency_key == key
    assert event.livemode is False and event.api_version
    # Forged: another secret or a tampered body fails verification.
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.Webhook.construct_event(payload.decode(), header, "whsec_other")
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.Webhook.construct_event(payload.decode().replace("4900", "1"), header, SECRET)
    # The event is also served by the events API.
    assert stripe_sandbox.v1.events.retrieve(event.id).type == "payment_intent.succeeded"


def test_failed_and_refunded_events(stripe_sandbox, receiver):
    key = unique()
    with pytest.raises(stripe.CardError):
        create(stripe_sandbox, key, pm="pm_card_chargeDeclinedInsufficientFunds")
    (failed,) = wait_for(lambda: receiver.events(key), what="failure webhook")
    assert failed["type"] == "payment_intent.payment_failed"
    assert failed["data"]["object"]["last_payment_error"]["decline_code"] == "insufficient_funds"

    key2 = unique()
    pi = create(stripe_sandbox, key2)
    stripe_sandbox.v1.refunds.create(params={"payment_intent": pi.id})
    events = wait_for(lambda: len(receiver.events(key2)) >= 2 and receiver.events(key2))
    kinds = sorted(e["type"] for e in events)
    assert kinds == ["charge.refunded", "payment_intent.succeeded"]
    charge = next(e for e in events if e["type"] == "charge.refunded")["data"]["object"]
    assert charge["payment_intent"] == pi.id and charge["refunded"] is True


def test_retried_on_500(stripe_sandbox, payments_sandbox, receiver):
    receiver.fail_next = 2
    key = unique()
    create(stripe_sandbox, key)
    events = wait_for(lambda: len(receiver.events(key)) >= 3 and receiver.events(key))
    assert len({e["id"] for e in events}) == 1  # the same event, three times
    attempts = [
        (d["attempt"], d["status_code"])
        for d in payments_sandbox.client.deliveries()
        if d["event_id"] == events[0]["id"]
    ]
    assert attempts == [(1, 500), (2, 500), (3, 200)]


def test_retry_gives_up_after_max_attempts(stripe_sandbox, payments_sandbox, receiver):
    payments_sandbox.client.config(webhook_max_attempts=2)
    receiver.fail_next = 5
    key = unique()
    create(stripe_sandbox, key)
    wait_for(lambda: len(receiver.events(key)) >= 2)
    event_id = receiver.events(key)[0]["id"]
    wait_for(
        lambda: (
            len([d for d in payments_sandbox.client.deliveries() if d["event_id"] == event_id]) == 2
        )
    )
    assert len(receiver.events(key)) == 2
    receiver.fail_next = 0


def test_duplicates(stripe_sandbox, payments_sandbox, receiver):
    payments_sandbox.client.config(webhook_duplicate=1.0)
    key = unique()
    create(stripe_sandbox, key)
    events = wait_for(lambda: len(receiver.events(key)) >= 2 and receiver.events(key))
    assert events[0]["id"] == events[1]["id"]


def test_loss(stripe_sandbox, payments_sandbox, receiver):
    payments_sandbox.client.config(webhook_loss=1.0)
    key = unique()
    create(stripe_sandbox, key)
    events = stripe_sandbox.v1.events.list(params={"type": "payment_intent.succeeded"})
    event = next(e for e in events.data if e.data.object.metadata["agentops_key"] == key)
    wait_for(
        lambda: [d for d in payments_sandbox.client.deliveries() if d["event_id"] == event.id],
        what="loss recorded",
    )
    (delivery,) = [d for d in payments_sandbox.client.deliveries() if d["event_id"] == event.id]
    assert delivery["error"] == "lost" and delivery["status_code"] is None
    assert receiver.events(key) == []


def test_delay_and_reorder(stripe_sandbox, payments_sandbox, receiver):
    payments_sandbox.client.config(webhook_delay=0.3, webhook_reorder=True)
    try:
        keys = [unique() for _ in range(6)]
        for key in keys:
            create(stripe_sandbox, key)
        assert all(receiver.events(k) == [] for k in keys)  # delayed
        wait_for(lambda: all(receiver.events(k) for k in keys), what="all delivered")
        with receiver.lock:
            bodies = [json.loads(b) for b, _ in receiver.received]
        arrived = [
            e["data"]["object"]["metadata"]["agentops_key"]
            for e in bodies
            if e["data"]["object"]["metadata"].get("agentops_key") in keys
        ]
        assert sorted(arrived) == sorted(keys)
        assert arrived != keys  # shuffled (seeded)
    finally:
        payments_sandbox.client.config(webhook_delay=0, webhook_reorder=False)
