"""The mail sandbox over HTTP."""

from __future__ import annotations

import urllib.error

import pytest

from tests.sandbox.fixtures import http_json, unique, wait_for


def message(message_id: str, /, **overrides):
    return {
        "to": "ada@example.com",
        "subject": "Your itinerary",
        "body": "Flight AB123, hotel booked.",
        "message_id": message_id,
        **overrides,
    }


def send(mail_sandbox, body, key, timeout=5.0):
    return http_json("POST", mail_sandbox.url + "/v1/messages", body, key=key, timeout=timeout)


def test_send_lookup_and_replay(mail_sandbox):
    key = unique()
    mid = f"<{key}@agentops>"
    first = send(mail_sandbox, message(mid), key)
    assert first.status == 200
    assert first.body["id"].startswith("msg_")
    assert first.body["status"] == "sent" and first.body["message_id"] == mid
    assert first.body["to"] == "ada@example.com" and first.body["created"] > 0

    again = send(mail_sandbox, message(mid), key)
    assert again.body["id"] == first.body["id"]
    assert again.headers["Idempotent-Replayed"] == "true"

    found = http_json("GET", f"{mail_sandbox.url}/v1/messages?message_id={mid}")
    assert [m["id"] for m in found.body["data"]] == [first.body["id"]]
    got = http_json("GET", f"{mail_sandbox.url}/v1/messages/{first.body['id']}")
    assert got.body["subject"] == "Your itinerary"
    assert http_json("GET", f"{mail_sandbox.url}/v1/messages/msg_nope").status == 404

    (entry,) = mail_sandbox.client.ledger(key=key)
    assert entry["reference"] == mid and entry["object_id"] == first.body["id"]
    assert mail_sandbox.client.ledger(reference=mid) == [entry]


def test_key_reuse_with_other_params(mail_sandbox):
    key = unique()
    send(mail_sandbox, message(key), key)
    reply = send(mail_sandbox, message(key, subject="Other"), key)
    assert reply.status == 400
    assert reply.body["error"]["type"] == "idempotency_error"
    assert len(mail_sandbox.client.ledger(key=key)) == 1


@pytest.mark.parametrize(
    ("overrides", "param"),
    [
        ({"to": "not-an-address"}, "to"),
        ({"subject": ""}, "subject"),
        ({"message_id": 5}, "message_id"),
    ],
)
def test_invalid_is_400_and_not_saved(mail_sandbox, overrides, param):
    key = unique()
    reply = send(mail_sandbox, message(key, **overrides), key)
    assert reply.status == 400
    assert reply.body["error"]["type"] == "invalid_request_error"
    assert reply.body["error"]["param"] == param
    assert mail_sandbox.client.ledger(key=key) == []
    assert send(mail_sandbox, message(key), key).status == 200


@pytest.mark.usefixtures("clean_faults")
def test_drop_after_effect_then_replay(mail_sandbox):
    key = unique()
    mail_sandbox.client.fault("messages.send", "drop_after_effect")
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        send(mail_sandbox, message(key), key)
    (entry,) = mail_sandbox.client.ledger(key=key)
    retry = send(mail_sandbox, message(key), key)
    assert retry.body["id"] == entry["object_id"]
    assert retry.headers["Idempotent-Replayed"] == "true"


@pytest.mark.usefixtures("clean_faults")
def test_latency_before_effect_lands_after_timeout(mail_sandbox):
    key = unique()
    # The client gives up at 0.15 s, the send lands at 1.5 s: ten times apart, so the ledger
    # read just after the client gave up comes before it on a busy machine too.
    mail_sandbox.client.fault("messages.send", "latency_before_effect", delay=1.5)
    with pytest.raises((TimeoutError, urllib.error.URLError)):
        send(mail_sandbox, message(key), key, timeout=0.15)
    assert mail_sandbox.client.ledger(key=key) == []
    wait_for(lambda: mail_sandbox.client.ledger(key=key), timeout=15, what="late send")
    assert send(mail_sandbox, message(key), key).headers["Idempotent-Replayed"] == "true"


@pytest.mark.usefixtures("clean_faults")
@pytest.mark.parametrize(("fault", "status"), [("error_500_before", 500), ("rate_limit", 429)])
def test_refusals_do_nothing(mail_sandbox, fault, status):
    key = unique()
    mail_sandbox.client.fault("messages.send", fault)
    assert send(mail_sandbox, message(key), key).status == status
    assert mail_sandbox.client.ledger(key=key) == []


@pytest.mark.usefixtures("clean_faults")
def test_error_500_after_is_replayed(mail_sandbox):
    key = unique()
    mail_sandbox.client.fault("messages.send", "error_500_after")
    assert send(mail_sandbox, message(key), key).status == 500
    again = send(mail_sandbox, message(key), key)
    assert again.status == 500 and again.headers["Idempotent-Replayed"] == "true"
    assert len(mail_sandbox.client.ledger(key=key)) == 1
    found = http_json("GET", f"{mail_sandbox.url}/v1/messages?message_id={key}")
    assert len(found.body["data"]) == 1
