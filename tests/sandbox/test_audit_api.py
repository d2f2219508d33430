"""What the provider audit reads of the sandboxes, in their providers' shapes: lists by created
window and a page at a time, a refund made in the dashboard, an object the provider lost, and
which run of the provider answers."""

from __future__ import annotations

import time

import pytest
import stripe

from sandbox.client import SandboxError
from tests.sandbox.fixtures import http_json, stripe_client, unique


def test_refunds_are_listed_by_created_window_with_their_payment_expanded(payments_sandbox):
    client = stripe_client(payments_sandbox.url)
    key = unique("ao")
    intent = client.v1.payment_intents.create(
        params={
            "amount": 2500,
            "currency": "eur",
            "payment_method": "pm_card_visa",
            "confirm": True,
            "metadata": {"agentops_key": key},
        }
    )
    now = int(time.time())
    refund = payments_sandbox.client.refund_from_dashboard(intent.id, amount=1000)
    assert refund["metadata"] == {} and refund["amount"] == 1000  # no key of ours
    (entry,) = payments_sandbox.client.ledger(operation="refunds.create", reference=key)
    assert entry["via"] == "dashboard" and entry["key"] is None

    listed = client.v1.refunds.list(
        params={
            "created": {"gte": now - 1, "lte": now + 5},
            "limit": 100,
            "expand": ["data.payment_intent", "data.charge"],
        }
    )
    (found,) = [r.to_dict() for r in listed.data if r.id == refund["id"]]
    assert found["payment_intent"]["metadata"] == {"agentops_key": key}
    assert found["charge"]["amount_refunded"] == 1000
    later = client.v1.refunds.list(params={"created": {"gte": now + 60}})
    assert refund["id"] not in [r.id for r in later.data]
    intents = client.v1.payment_intents.list(
        params={"created": {"gte": now - 1}, "expand": ["data.latest_charge"], "limit": 100}
    )
    (shown,) = [i.to_dict() for i in intents.data if i.id == intent.id]
    assert shown["latest_charge"]["amount_refunded"] == 1000


def test_a_forgotten_payment_is_shown_nowhere(payments_sandbox):
    client = stripe_client(payments_sandbox.url)
    intent = client.v1.payment_intents.create(
        params={"amount": 900, "currency": "usd", "payment_method": "pm_card_visa", "confirm": True}
    )
    payments_sandbox.client.forget(intent.id)
    with pytest.raises(stripe.InvalidRequestError):
        client.v1.payment_intents.retrieve(intent.id)
    assert intent.id not in [i.id for i in client.v1.payment_intents.list(params={"limit": 100})]
    assert payments_sandbox.client.ledger(operation="payment_intents.create")  # still asked
    with pytest.raises(SandboxError) as missing:
        payments_sandbox.client.forget(intent.id)
    assert missing.value.status == 404


def test_messages_are_listed_by_created_window_a_page_at_a_time(mail_sandbox):
    start = int(time.time())
    sent = []
    for _ in range(3):
        key = unique("ao")
        body = {
            "to": "ada@example.com",
            "subject": "s",
            "body": "b",
            "message_id": f"<{key}@agentops>",
        }
        sent.append(http_json("POST", f"{mail_sandbox.url}/v1/messages", body, key=key).body["id"])
    window = f"created[gte]={start}&created[lte]={int(time.time()) + 1}"
    pages, after = [], ""
    while True:
        page = http_json("GET", f"{mail_sandbox.url}/v1/messages?{window}&limit=2{after}").body
        pages.append([m["id"] for m in page["data"]])
        if not page["has_more"]:
            break
        after = f"&starting_after={page['data'][-1]['id']}"
    seen = [m for p in pages for m in p]
    assert set(seen) >= set(sent) and len(seen) == len(set(seen))  # each once, every page
    assert all(len(p) <= 2 for p in pages) and len(pages) >= 2
    mail_sandbox.client.forget(sent[1])
    again = http_json("GET", f"{mail_sandbox.url}/v1/messages?{window}").body
    assert sent[1] not in [m["id"] for m in again["data"]] and again["has_more"] is False


def test_holds_and_bookings_are_listed_by_created_window(bookings_sandbox):
    start = time.time()
    hold = http_json(
        "POST",
        f"{bookings_sandbox.url}/v1/flight_holds",
        {"flight": "TP1", "passenger": "Ada", "reference": unique("ao")},
        key=unique(),
    ).body
    inside = http_json(
        "GET", f"{bookings_sandbox.url}/v1/flight_holds?created[gte]={start - 1}&limit=100"
    ).body
    assert hold["id"] in [h["id"] for h in inside["data"]]
    after = http_json(
        "GET", f"{bookings_sandbox.url}/v1/flight_holds?created[gt]={hold['created']}"
    ).body
    assert hold["id"] not in [h["id"] for h in after["data"]]


def test_each_run_of_a_provider_says_which_it_is(payments_sandbox, mail_sandbox):
    about = payments_sandbox.client.about()
    assert about["provider"] == "payments" and about["boot_id"].startswith("boot_")
    assert payments_sandbox.client.about()["boot_id"] == about["boot_id"]  # the same run
    assert mail_sandbox.client.about()["boot_id"] != about["boot_id"]  # another process
