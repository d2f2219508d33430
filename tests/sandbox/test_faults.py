"""Every fault, seen by the real ``stripe`` library, checked against the ledger."""

from __future__ import annotations

import socket
import time

import pytest
import stripe

from tests.sandbox.fixtures import error_of, headers_of, stripe_client, unique, wait_for
from tests.sandbox.test_payments import create

pytestmark = pytest.mark.usefixtures("clean_faults")

OP = "payment_intents.create"


def test_latency_before_effect_the_six_second_case(payments_sandbox, stripe_sandbox):
    """The client gives up at 0.1 s; the charge lands at 1.5 s; the key settles it.

    Fifteen times apart, so that a busy machine cannot let the charge land before the
    client has given up and the ledger is read (which shows it gave up first)."""
    key = unique()
    payments_sandbox.client.fault(OP, "latency_before_effect", delay=1.5)
    impatient = stripe_client(payments_sandbox.url, timeout=0.1)
    with pytest.raises(stripe.APIConnectionError):
        create(impatient, key)
    assert payments_sandbox.client.ledger(key=key) == []  # not yet...
    (entry,) = wait_for(
        lambda: payments_sandbox.client.ledger(key=key), timeout=15, what="late effect"
    )
    retry = create(stripe_sandbox, key)  # ...but it happened: the retry replays it
    assert retry.id == entry["object_id"]
    assert retry.last_response.headers["Idempotent-Replayed"] == "true"
    assert len(payments_sandbox.client.ledger(key=key)) == 1


def test_latency_after_effect(payments_sandbox, stripe_sandbox):
    """The charge happens at once, its reply comes 5 s later, and the client gives up at
    0.5 s: long enough for the sandbox to act, ten times too short for the reply."""
    key = unique()
    payments_sandbox.client.fault(OP, "latency_after_effect", delay=5.0)
    with pytest.raises(stripe.APIConnectionError):
        create(stripe_client(payments_sandbox.url, timeout=0.5), key)
    (entry,) = payments_sandbox.client.ledger(key=key)  # the effect came first
    retry = create(stripe_sandbox, key)
    assert retry.id == entry["object_id"]
    assert retry.last_response.headers["Idempotent-Replayed"] == "true"


def test_latency_within_timeout_is_just_slow(payments_sandbox, stripe_sandbox):
    key = unique()
    payments_sandbox.client.fault(OP, "latency_before_effect", delay=0.2)
    started = time.monotonic()
    pi = create(stripe_sandbox, key)
    assert time.monotonic() - started >= 0.2
    assert pi.status == "succeeded"


def test_drop_after_effect(payments_sandbox, stripe_sandbox):
    key = unique()
    payments_sandbox.client.fault(OP, "drop_after_effect")
    with pytest.raises(stripe.APIConnectionError):
        create(stripe_sandbox, key)
    (entry,) = payments_sandbox.client.ledger(key=key)
    retry = create(stripe_sandbox, key)
    assert retry.id == entry["object_id"]
    assert retry.last_response.headers["Idempotent-Replayed"] == "true"
    assert len(payments_sandbox.client.ledger(key=key)) == 1


def test_error_500_before_effect(payments_sandbox, stripe_sandbox):
    key = unique()
    payments_sandbox.client.fault(OP, "error_500_before")
    with pytest.raises(stripe.APIError) as exc:
        create(stripe_sandbox, key)
    assert exc.value.http_status == 500
    assert error_of(exc).type == "api_error"
    assert payments_sandbox.client.ledger(key=key) == []
    retry = create(stripe_sandbox, key)  # nothing was saved: a fresh request
    assert "Idempotent-Replayed" not in retry.last_response.headers
    assert len(payments_sandbox.client.ledger(key=key)) == 1


def test_error_500_after_effect_is_saved_and_replayed(payments_sandbox, stripe_sandbox):
    key = unique()
    payments_sandbox.client.fault(OP, "error_500_after")
    with pytest.raises(stripe.APIError) as exc:
        create(stripe_sandbox, key)
    assert exc.value.http_status == 500
    (entry,) = payments_sandbox.client.ledger(key=key)  # yet the charge happened
    with pytest.raises(stripe.APIError) as again:
        create(stripe_sandbox, key)
    assert again.value.http_status == 500
    assert headers_of(again)["Idempotent-Replayed"] == "true"
    assert len(payments_sandbox.client.ledger(key=key)) == 1
    # Only a lookup can tell: search by the key in metadata finds it.
    found = stripe_sandbox.v1.payment_intents.search(
        params={"query": f"metadata['agentops_key']:'{key}'"}
    )
    assert [p.id for p in found.data] == [entry["object_id"]]


def test_rate_limit(payments_sandbox, stripe_sandbox):
    key = unique()
    payments_sandbox.client.fault(OP, "rate_limit")
    with pytest.raises(stripe.RateLimitError):
        create(stripe_sandbox, key)
    assert payments_sandbox.client.ledger(key=key) == []


def test_conflict(payments_sandbox, stripe_sandbox):
    key = unique()
    payments_sandbox.client.fault(OP, "conflict")
    with pytest.raises(stripe.APIError) as exc:
        create(stripe_sandbox, key)
    assert exc.value.http_status == 409
    assert payments_sandbox.client.ledger(key=key) == []
    assert create(stripe_sandbox, key).status == "succeeded"


def test_reset_before_read(payments_sandbox, stripe_sandbox):
    key = unique()
    payments_sandbox.client.fault(OP, "reset_before_read")
    with pytest.raises(stripe.APIConnectionError):
        create(stripe_sandbox, key)
    assert payments_sandbox.client.ledger(key=key) == []


def test_reset_is_a_real_rst(payments_sandbox):
    payments_sandbox.client.fault("payment_intents.list", "reset_before_read")
    with socket.create_connection(("127.0.0.1", payments_sandbox.port), timeout=2) as s:
        s.sendall(b"GET /v1/payment_intents HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        with pytest.raises(ConnectionResetError):
            s.recv(100)
            s.recv(100)


def test_down_refuses_connections_then_recovers(payments_sandbox, stripe_sandbox):
    key = unique()
    payments_sandbox.client.fault("*", "down", delay=1.0)
    with pytest.raises(stripe.APIConnectionError), socket.socket() as probe:
        probe.settimeout(1)
        try:
            probe.connect(("127.0.0.1", payments_sandbox.port))
        except ConnectionRefusedError:
            create(stripe_sandbox, key)  # refused too
        else:
            pytest.fail("the port still accepts connections")
    wait_for(payments_sandbox.client.health, timeout=10, what="provider back up")
    assert payments_sandbox.client.ledger(key=key) == []
    assert create(stripe_sandbox, key).status == "succeeded"


def test_fault_times_and_every_time(payments_sandbox, stripe_sandbox):
    payments_sandbox.client.fault(OP, "error_500_before", times=2)
    for _ in range(2):
        with pytest.raises(stripe.APIError):
            create(stripe_sandbox, unique())
    assert create(stripe_sandbox, unique()).status == "succeeded"

    payments_sandbox.client.fault(OP, "rate_limit", times=None)
    for _ in range(3):
        with pytest.raises(stripe.RateLimitError):
            create(stripe_sandbox, unique())
    assert payments_sandbox.client.faults()[0]["times"] is None
    payments_sandbox.client.clear_faults()
    assert payments_sandbox.client.faults() == []
    assert create(stripe_sandbox, unique()).status == "succeeded"


def test_fault_probability_is_seeded(payments_sandbox, stripe_sandbox):
    def pattern() -> list[bool]:
        payments_sandbox.client.clear_faults()
        payments_sandbox.client.fault(OP, "rate_limit", times=None, probability=0.5, seed=7)
        seen = []
        for _ in range(12):
            try:
                create(stripe_sandbox, unique())
                seen.append(False)
            except stripe.RateLimitError:
                seen.append(True)
        return seen

    first = pattern()
    assert first == pattern()
    assert any(first) and not all(first)


def test_fault_scoped_to_operation(payments_sandbox, stripe_sandbox):
    payments_sandbox.client.fault("refunds.create", "error_500_before")
    pi = create(stripe_sandbox, unique())  # other operations unaffected
    with pytest.raises(stripe.APIError):
        stripe_sandbox.v1.refunds.create(params={"payment_intent": pi.id})
    assert stripe_sandbox.v1.refunds.create(params={"payment_intent": pi.id}).amount == 4900


def test_bad_fault_is_refused(payments_sandbox):
    from sandbox.client import SandboxError

    with pytest.raises(SandboxError) as exc:
        payments_sandbox.client.fault(OP, "gremlins")
    assert exc.value.status == 400


def test_library_retries_reuse_the_key(payments_sandbox):
    """stripe's own retries (max_network_retries) resend the same key: one charge."""
    key = unique()
    payments_sandbox.client.fault(OP, "drop_after_effect")
    retrying = stripe.StripeClient(
        "sk_test_sandbox",
        base_addresses={"api": payments_sandbox.url},
        max_network_retries=1,
        http_client=stripe.RequestsClient(timeout=2),
    )
    pi = create(retrying, key)
    assert pi.last_response.headers["Idempotent-Replayed"] == "true"
    (entry,) = payments_sandbox.client.ledger(key=key)
    assert entry["object_id"] == pi.id


def test_network_faults_also_hit_replays(payments_sandbox, stripe_sandbox):
    key = unique()
    pi = create(stripe_sandbox, key)
    payments_sandbox.client.fault(OP, "drop_after_effect")
    with pytest.raises(stripe.APIConnectionError):
        create(stripe_sandbox, key)  # the replay's reply is lost; nothing new happens
    assert create(stripe_sandbox, key).id == pi.id
    assert len(payments_sandbox.client.ledger(key=key)) == 1


def test_every_applied_fault_is_logged_with_the_requests_key(payments_sandbox, stripe_sandbox):
    hit, spared = unique(), unique()
    payments_sandbox.client.fault(OP, "error_500_after")
    before = time.time()
    with pytest.raises(stripe.APIError):
        create(stripe_sandbox, hit)
    create(stripe_sandbox, spared)
    logged = [e for e in payments_sandbox.client.fault_log() if e["key"] in (hit, spared)]
    assert [(e["fault"], e["operation"], e["key"]) for e in logged] == [
        ("error_500_after", OP, hit)
    ]
    assert before <= logged[0]["at"] <= time.time()


def test_a_key_used_after_its_lifetime_is_logged_as_expired(payments_sandbox, stripe_sandbox):
    key = unique()
    payments_sandbox.client.config(key_lifetime=0.2)
    try:
        create(stripe_sandbox, key)
        time.sleep(0.3)
        create(stripe_sandbox, key)  # forgotten: a second effect, as real Stripe would do
    finally:
        payments_sandbox.client.config(key_lifetime=86400)
    assert len(payments_sandbox.client.ledger(key=key)) == 2
    expired = [e for e in payments_sandbox.client.fault_log() if e["key"] == key]
    assert [e["fault"] for e in expired] == ["key_expired"]
