"""The stripe library over agentops' own client (commerce.tools.payments.StripeTransport):
its requests as it builds them, its answers as it reads them, and a failure told as the
library's APIConnectionError that still says whether anything was sent, and whether the
library may try again under the same key (as its requests transport would say)."""

from __future__ import annotations

import socket
import threading

import pytest
import stripe
from django.test import override_settings

from commerce.tools.payments import StripeTransport, observe_stripe, stripe_client
from journal.outcomes import Interrupted, NotSent
from tests.agentops.test_wire import Provider, answering, provider

INTENT = (
    b'{"id": "pi_1", "object": "payment_intent", "status": "succeeded", "amount": 4900,'
    b' "currency": "usd", "latest_charge": "ch_1", "metadata": {"agentops_key": "ao:k:1"}}'
)
ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nRequest-Id: req_1\r\n"
    b"Idempotent-Replayed: false\r\nContent-Length: " + str(len(INTENT)).encode() + b"\r\n\r\n"
    + INTENT
)


def _charge(url: str, *, timeout: float = 2.0) -> stripe.PaymentIntent:
    with override_settings(STRIPE_API_BASE=url, STRIPE_API_KEY="sk_test_x"):
        client = stripe_client(timeout=timeout)
    return client.v1.payment_intents.create(
        params={"amount": 4900, "currency": "usd", "metadata": {"agentops_key": "ao:k:1"}},
        options={"idempotency_key": "ao:k:1"},
    )


def test_the_library_sends_and_reads_through_it() -> None:
    with provider(answering(ANSWER)) as p:
        intent = _charge(p.url)
    assert intent.id == "pi_1" and intent.status == "succeeded"
    assert intent.last_response is not None and intent.last_response.request_id == "req_1"
    [sent] = p.requests
    head, _, body = sent.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/payment_intents HTTP/1.1")
    assert b"\r\nIdempotency-Key: ao:k:1" in head and b"Authorization: Bearer sk_test_x" in head
    assert b"amount=4900" in body and b"metadata[agentops_key]=ao%3Ak%3A1" in body.replace(
        b"%5B", b"["
    ).replace(b"%5D", b"]")


def test_a_refused_connection_was_not_sent_and_may_be_tried_again() -> None:
    port = socket.create_server(("127.0.0.1", 0))
    number = port.getsockname()[1]
    port.close()
    with pytest.raises(stripe.APIConnectionError) as raised:
        _charge(f"http://127.0.0.1:{number}")
    assert raised.value.should_retry is True
    seen = observe_stripe(raised.value)
    assert isinstance(seen, NotSent) and seen.error_class == "ConnectionRefusedError"


def test_an_answer_that_never_comes_is_interrupted() -> None:
    gone = threading.Event()

    def silent(conn: socket.socket, p: Provider) -> None:
        p.read_request(conn)
        gone.wait(10)

    with provider(silent) as p, pytest.raises(stripe.APIConnectionError) as raised:
        _charge(p.url, timeout=0.2)
    gone.set()
    assert raised.value.should_retry is True  # the same key again, as requests would
    seen = observe_stripe(raised.value)
    assert isinstance(seen, Interrupted) and seen.error_class == "ReadTimeout"
    assert len(p.requests) == 1


def test_it_is_the_transport_the_tool_uses() -> None:
    with override_settings(STRIPE_API_KEY="sk_test_x"):
        client = stripe_client(timeout=1.0)
    assert isinstance(client._requestor._client, StripeTransport)
