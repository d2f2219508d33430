"""The payments sandbox through the real ``stripe`` library, over HTTP."""

from __future__ import annotations

import threading
import time
import urllib.request

import pytest
import stripe

from tests.sandbox.fixtures import error_of, headers_of, stripe_client, unique, wait_for


def create(client, key, pm="pm_card_visa", amount=4900, **extra):
    params = {
        "amount": amount,
        "currency": "eur",
        "payment_method": pm,
        "confirm": True,
        "metadata": {"agentops_key": key, "invoice": "INV-2291"},
        "description": "Invoice INV-2291",
        **extra,
    }
    return client.v1.payment_intents.create(params=params, options={"idempotency_key": key})


def test_create_retrieve_list_search(stripe_sandbox, payments_sandbox):
    key = unique()
    pi = create(stripe_sandbox, key, expand=["latest_charge"])
    assert pi.id.startswith("pi_")
    assert pi.object == "payment_intent"
    assert pi.status == "succeeded"
    assert pi.amount == 4900 and pi.amount_received == 4900 and pi.currency == "eur"
    assert pi.metadata["agentops_key"] == key
    assert pi.latest_charge.id.startswith("ch_")  # expanded
    assert pi.last_response.headers["Request-Id"].startswith("req_")

    got = stripe_sandbox.v1.payment_intents.retrieve(pi.id)
    assert got.id == pi.id and got.latest_charge == pi.latest_charge.id

    listed = stripe_sandbox.v1.payment_intents.list(
        params={"limit": 100, "created": {"gte": pi.created}}
    )
    assert listed.object == "list"
    assert pi.id in [p.id for p in listed.data]

    found = stripe_sandbox.v1.payment_intents.search(
        params={"query": f"metadata['agentops_key']:'{key}' AND status:'succeeded'"}
    )
    assert found.object == "search_result"
    assert [p.id for p in found.data] == [pi.id]
    assert found.has_more is False
    none = stripe_sandbox.v1.payment_intents.search(
        params={"query": f"metadata['agentops_key']:'{key}' AND status:'canceled'"}
    )
    assert none.data == []

    ledger = payments_sandbox.client.ledger(key=key)
    assert len(ledger) == 1
    assert ledger[0]["operation"] == "payment_intents.create"
    assert ledger[0]["reference"] == key and ledger[0]["object_id"] == pi.id
    assert payments_sandbox.client.ledger(reference=key) == ledger


def test_list_pagination(stripe_sandbox):
    ids = [create(stripe_sandbox, unique()).id for _ in range(3)]
    first = stripe_sandbox.v1.payment_intents.list(params={"limit": 2})
    assert [p.id for p in first.data] == ids[::-1][:2]
    assert first.has_more is True
    rest = stripe_sandbox.v1.payment_intents.list(
        params={"limit": 1, "starting_after": first.data[-1].id}
    )
    assert rest.data[0].id == ids[0]


def test_retrieve_missing_is_404(stripe_sandbox):
    with pytest.raises(stripe.InvalidRequestError) as exc:
        stripe_sandbox.v1.payment_intents.retrieve("pi_doesnotexist")
    assert exc.value.http_status == 404
    assert exc.value.code == "resource_missing"


@pytest.mark.parametrize("pm", ["pm_card_visa", "pm_card_mastercard"])
def test_succeeding_payment_methods(stripe_sandbox, pm):
    pi = create(stripe_sandbox, unique(), pm=pm)
    assert pi.status == "succeeded"
    assert pi.latest_charge.startswith("ch_")
    assert pi.last_payment_error is None


@pytest.mark.parametrize(
    ("pm", "brand", "last4"),
    [
        ("pm_card_visa", "visa", "4242"),
        ("pm_card_mastercard", "mastercard", "4444"),
        ("pm_card_amex", "amex", "8431"),
        ("pm_card_chargeDeclinedInsufficientFunds", "visa", "9995"),
    ],
)
def test_the_charge_carries_the_test_cards_brand_and_last_four(stripe_sandbox, pm, brand, last4):
    """As Stripe's test cards: the charge's payment_method_details.card, the intent's
    latest_charge when expanded; never a card number."""
    try:
        charge = create(stripe_sandbox, unique(), pm=pm, expand=["latest_charge"]).latest_charge
    except stripe.CardError as exc:  # a declined card's charge is there all the same
        assert exc.error is not None and exc.error.charge
        charge = stripe_sandbox.v1.charges.retrieve(exc.error.charge)
    charge = charge.to_dict()
    assert charge["payment_method_details"] == {
        "type": "card",
        "card": {"brand": brand, "last4": last4},
    }
    assert "number" not in str(charge)


@pytest.mark.parametrize(
    ("pm", "code", "decline_code"),
    [
        ("pm_card_chargeDeclined", "card_declined", "generic_decline"),
        ("pm_card_chargeDeclinedInsufficientFunds", "card_declined", "insufficient_funds"),
        ("pm_card_chargeDeclinedExpiredCard", "expired_card", "expired_card"),
    ],
)
def test_declined_payment_methods(stripe_sandbox, payments_sandbox, pm, code, decline_code):
    key = unique()
    with pytest.raises(stripe.CardError) as exc:
        create(stripe_sandbox, key, pm=pm)
    err = exc.value
    assert err.http_status == 402
    assert err.code == code
    assert error_of(exc).type == "card_error"
    assert error_of(exc).decline_code == decline_code
    # As in Stripe, the declined confirm still created the PaymentIntent.
    pi = error_of(exc).payment_intent
    assert pi.status == "requires_payment_method"
    assert pi.last_payment_error.decline_code == decline_code
    assert pi.metadata["agentops_key"] == key
    assert stripe_sandbox.v1.payment_intents.retrieve(pi.id).status == "requires_payment_method"
    (entry,) = payments_sandbox.client.ledger(key=key)
    assert entry["object_id"] == pi.id and entry["status"] == "requires_payment_method"

    # The 402 is saved for the key and replayed.
    with pytest.raises(stripe.CardError) as again:
        create(stripe_sandbox, key, pm=pm)
    assert headers_of(again)["Idempotent-Replayed"] == "true"
    assert error_of(again).payment_intent.id == pi.id
    assert len(payments_sandbox.client.ledger(key=key)) == 1


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"currency": "eur", "payment_method": "pm_card_visa", "confirm": True}, "amount"),
        ({"amount": "49.00", "currency": "eur", "payment_method": "pm_card_visa"}, "amount"),
        ({"amount": 0, "currency": "eur"}, "amount"),
        ({"amount": 4900, "payment_method": "pm_card_visa"}, "currency"),
        ({"amount": 4900, "currency": "eur", "payment_method": "pm_card_nope"}, "payment_method"),
    ],
)
def test_validation_errors_are_400_and_not_saved(stripe_sandbox, payments_sandbox, params, param):
    key = unique()
    with pytest.raises(stripe.InvalidRequestError) as exc:
        stripe_sandbox.v1.payment_intents.create(params=params, options={"idempotency_key": key})
    assert exc.value.http_status == 400
    assert exc.value.param == param
    assert error_of(exc).type == "invalid_request_error"
    assert payments_sandbox.client.ledger(key=key) == []
    # Not saved: the same key with (other, valid) parameters is a fresh request.
    pi = create(stripe_sandbox, key)
    assert pi.status == "succeeded"
    assert "Idempotent-Replayed" not in pi.last_response.headers


def test_authentication_required(payments_sandbox):
    bad = stripe.StripeClient(
        "not_a_key", base_addresses={"api": payments_sandbox.url}, max_network_retries=0
    )
    with pytest.raises(stripe.AuthenticationError):
        bad.v1.payment_intents.list()
    req = urllib.request.Request(payments_sandbox.url + "/v1/payment_intents")  # noqa: S310
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req, timeout=5)  # noqa: S310
    assert exc.value.code == 401


def test_idempotent_replay(stripe_sandbox, payments_sandbox):
    key = unique()
    first = create(stripe_sandbox, key)
    assert "Idempotent-Replayed" not in first.last_response.headers
    second = create(stripe_sandbox, key)
    assert second.id == first.id
    assert second.last_response.headers["Idempotent-Replayed"] == "true"
    assert len(payments_sandbox.client.ledger(key=key)) == 1


def test_key_reuse_with_other_params(stripe_sandbox, payments_sandbox):
    key = unique()
    create(stripe_sandbox, key, amount=4900)
    with pytest.raises(stripe.IdempotencyError) as exc:
        create(stripe_sandbox, key, amount=4901)
    assert exc.value.http_status == 400
    assert error_of(exc).type == "idempotency_error"
    assert len(payments_sandbox.client.ledger(key=key)) == 1


def test_concurrent_same_key_is_409(stripe_sandbox, payments_sandbox, clean_faults):
    key = unique()
    payments_sandbox.client.fault("payment_intents.create", "latency_before_effect", delay=0.5)
    results: dict[str, object] = {}
    first = threading.Thread(target=lambda: results.update(pi=create(stripe_sandbox, key)))
    first.start()
    # The first request holds the key once it has taken the fault.
    wait_for(lambda: payments_sandbox.client.faults() == [], what="first request in flight")
    with pytest.raises(stripe.APIError) as exc:
        create(stripe_sandbox, key)
    assert exc.value.http_status == 409
    assert error_of(exc).code == "idempotency_key_in_use"
    assert error_of(exc).type == "idempotency_error"
    first.join(5)
    pi = results["pi"]
    assert create(stripe_sandbox, key).id == pi.id  # type: ignore[attr-defined]
    assert len(payments_sandbox.client.ledger(key=key)) == 1


def test_429_not_saved(stripe_sandbox, payments_sandbox, clean_faults):
    key = unique()
    payments_sandbox.client.fault("payment_intents.create", "rate_limit")
    with pytest.raises(stripe.RateLimitError) as exc:
        create(stripe_sandbox, key)
    assert exc.value.http_status == 429
    assert payments_sandbox.client.ledger(key=key) == []
    pi = create(stripe_sandbox, key)
    assert "Idempotent-Replayed" not in pi.last_response.headers
    assert len(payments_sandbox.client.ledger(key=key)) == 1


def test_key_lifetime(stripe_sandbox, payments_sandbox):
    key = unique()
    payments_sandbox.client.config(key_lifetime=0.2)
    try:
        first = create(stripe_sandbox, key)
        # Retrying with the key is a replay until the key is forgotten; then it is new.
        second = wait_for(
            lambda: (
                pi
                if "Idempotent-Replayed"
                not in (pi := create(stripe_sandbox, key)).last_response.headers
                else None
            ),
            timeout=3,
            what="key to expire",
        )
    finally:
        payments_sandbox.client.config(key_lifetime=86400)
    assert second.id != first.id
    assert [e["object_id"] for e in payments_sandbox.client.ledger(key=key)] == [
        first.id,
        second.id,
    ]


def test_search_lag(stripe_sandbox, payments_sandbox):
    key = unique()
    query = {"query": f"metadata['agentops_key']:'{key}'"}
    # A second of lag: the search just after the create (a few milliseconds) falls inside it
    # on a busy machine too.
    payments_sandbox.client.config(search_lag=1.0)
    try:
        started = time.monotonic()
        pi = create(stripe_sandbox, key)
        assert stripe_sandbox.v1.payment_intents.search(params=query).data == []
        # retrieve by id is not lagged
        assert stripe_sandbox.v1.payment_intents.retrieve(pi.id).id == pi.id
        found = wait_for(
            lambda: stripe_sandbox.v1.payment_intents.search(params=query).data,
            timeout=10,
            what="search to catch up",
        )
        assert time.monotonic() - started >= 1.0  # never sooner: a lower bound cannot flake
    finally:
        payments_sandbox.client.config(search_lag=0)
    assert [p.id for p in found] == [pi.id]


def test_refunds(stripe_sandbox, payments_sandbox):
    key = unique()
    pi = create(stripe_sandbox, key, amount=5000)
    undo = f"{key}:undo"
    partial = stripe_sandbox.v1.refunds.create(
        params={"payment_intent": pi.id, "amount": 1000, "metadata": {"agentops_key": undo}},
        options={"idempotency_key": undo},
    )
    assert partial.object == "refund" and partial.status == "succeeded"
    assert partial.amount == 1000 and partial.charge == pi.latest_charge
    replay = stripe_sandbox.v1.refunds.create(
        params={"payment_intent": pi.id, "amount": 1000, "metadata": {"agentops_key": undo}},
        options={"idempotency_key": undo},
    )
    assert replay.id == partial.id
    rest = stripe_sandbox.v1.refunds.create(params={"payment_intent": pi.id})
    assert rest.amount == 4000
    with pytest.raises(stripe.InvalidRequestError) as exc:
        stripe_sandbox.v1.refunds.create(params={"payment_intent": pi.id})
    assert exc.value.code == "charge_already_refunded"

    assert stripe_sandbox.v1.refunds.retrieve(partial.id).amount == 1000
    listed = stripe_sandbox.v1.refunds.list(params={"payment_intent": pi.id})
    assert {r.id for r in listed.data} == {partial.id, rest.id}
    charge = stripe_sandbox.v1.charges.retrieve(pi.latest_charge)
    assert charge.refunded is True and charge.amount_refunded == 5000

    refunds = payments_sandbox.client.ledger(operation="refunds.create")
    mine = [e for e in refunds if e["payment_intent"] == pi.id]
    assert [e["reference"] for e in mine] == [undo, key]  # own key, else the PI's key
    assert payments_sandbox.client.ledger(key=undo)[0]["object_id"] == partial.id


def test_refund_refused_when_not_succeeded(stripe_sandbox):
    with pytest.raises(stripe.CardError) as declined:
        create(stripe_sandbox, unique(), pm="pm_card_chargeDeclined")
    pi_id = error_of(declined).payment_intent.id
    with pytest.raises(stripe.InvalidRequestError) as exc:
        stripe_sandbox.v1.refunds.create(params={"payment_intent": pi_id})
    assert exc.value.http_status == 400
    with pytest.raises(stripe.InvalidRequestError):
        stripe_sandbox.v1.refunds.create(params={"payment_intent": "pi_missing"})


def test_stripe_client_helper_uses_sandbox(payments_sandbox):
    client = stripe_client(payments_sandbox.url, timeout=2)
    assert client.v1.payment_intents.list(params={"limit": 1}).data is not None


def test_invoices_are_a_record_to_read(stripe_sandbox, payments_sandbox):
    """The system of record agents read amounts and recipients from (issue 18): seeded through
    the admin API, read by the real ``stripe`` library's search and retrieve."""
    number = unique("INV")
    made = payments_sandbox.client.invoice(
        number=number, amount_due=4900, currency="usd", customer_email="ada@example.com"
    )
    assert made["id"].startswith("in_") and made["status"] == "open"
    found = stripe_sandbox.v1.invoices.search(params={"query": f"number:'{number}'"})
    [invoice] = found.data
    assert invoice.id == made["id"] and invoice.amount_due == 4900
    assert invoice.customer_email == "ada@example.com" and invoice.number == number
    assert stripe_sandbox.v1.invoices.retrieve(made["id"]).number == number
    nothing = stripe_sandbox.v1.invoices.search(params={"query": "number:'INV-nowhere'"})
    assert nothing.data == []
    with pytest.raises(stripe.InvalidRequestError) as missing:
        stripe_sandbox.v1.invoices.retrieve("in_nowhere")
    assert error_of(missing).code == "resource_missing"
    # One invoice per number; a bad one is refused.
    with pytest.raises(Exception, match="exists already"):
        payments_sandbox.client.invoice(number=number, amount_due=100)
    with pytest.raises(Exception, match="amount_due"):
        payments_sandbox.client.invoice(number=unique("INV"), amount_due=0)
