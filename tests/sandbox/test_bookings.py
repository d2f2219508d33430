"""The bookings sandbox over HTTP: flight holds and hotel bookings."""

from __future__ import annotations

import urllib.error

import pytest

from tests.sandbox.fixtures import http_json, unique, wait_for


def hold(sb, reference, key, /, timeout=5.0, **overrides):
    body = {"flight": "AB123", "passenger": "Ada Lovelace", "reference": reference, **overrides}
    return http_json("POST", sb.url + "/v1/flight_holds", body, key=key, timeout=timeout)


def book(sb, reference, key, /, **overrides):
    body = {
        "hotel": "Grand Hotel",
        "guest": "Ada Lovelace",
        "check_in": "2026-05-01",
        "check_out": "2026-05-03",
        "reference": reference,
        **overrides,
    }
    return http_json("POST", sb.url + "/v1/hotel_bookings", body, key=key)


def test_hold_lookup_release(bookings_sandbox):
    ref, key = unique("trip"), unique()
    first = hold(bookings_sandbox, ref, key)
    assert first.status == 200
    h = first.body
    assert h["id"].startswith("fh_") and h["status"] == "held" and h["reference"] == ref
    assert h["expires_at"] > h["created"]
    again = hold(bookings_sandbox, ref, key)
    assert again.body["id"] == h["id"] and again.headers["Idempotent-Replayed"] == "true"

    found = http_json("GET", f"{bookings_sandbox.url}/v1/flight_holds?reference={ref}")
    assert [x["id"] for x in found.body["data"]] == [h["id"]]

    undo = f"{key}:undo"
    url = f"{bookings_sandbox.url}/v1/flight_holds/{h['id']}/release"
    released = http_json("POST", url, {}, key=undo)
    assert released.body["status"] == "released"
    # Idempotent: with the key (replay) and even without (no second effect).
    assert http_json("POST", url, {}, key=undo).headers["Idempotent-Replayed"] == "true"
    assert http_json("POST", url, {}, key=unique()).body["status"] == "released"
    ops = [e["operation"] for e in bookings_sandbox.client.ledger(reference=ref)]
    assert ops == ["flight_holds.create", "flight_holds.release"]
    assert (
        http_json("POST", f"{bookings_sandbox.url}/v1/flight_holds/fh_x/release", {}).status == 404
    )


def test_hold_expiry(bookings_sandbox):
    bookings_sandbox.client.config(hold_expiry=0.2)
    try:
        ref = unique("trip")
        h = hold(bookings_sandbox, ref, unique()).body
    finally:
        bookings_sandbox.client.config(hold_expiry=900)
    assert h["status"] == "held"
    url = f"{bookings_sandbox.url}/v1/flight_holds/{h['id']}"
    wait_for(lambda: http_json("GET", url).body["status"] == "expired", what="hold to expire")
    found = http_json("GET", f"{bookings_sandbox.url}/v1/flight_holds?reference={ref}")
    assert found.body["data"][0]["status"] == "expired"
    released = http_json("POST", url + "/release", {}, key=unique())
    assert released.body["status"] == "expired"  # nothing left to release: no effect
    assert len(bookings_sandbox.client.ledger(reference=ref)) == 1


def test_hotel_book_cancel(bookings_sandbox):
    ref, key = unique("trip"), unique()
    b = book(bookings_sandbox, ref, key).body
    assert b["id"].startswith("hb_") and b["status"] == "booked"
    assert book(bookings_sandbox, ref, key).body["id"] == b["id"]
    found = http_json("GET", f"{bookings_sandbox.url}/v1/hotel_bookings?reference={ref}")
    assert [x["id"] for x in found.body["data"]] == [b["id"]]
    url = f"{bookings_sandbox.url}/v1/hotel_bookings/{b['id']}/cancel"
    assert http_json("POST", url, {}, key=f"{key}:undo").body["status"] == "cancelled"
    assert http_json("POST", url, {}).body["status"] == "cancelled"
    ops = [e["operation"] for e in bookings_sandbox.client.ledger(reference=ref)]
    assert ops == ["hotel_bookings.create", "hotel_bookings.cancel"]
    got = http_json("GET", f"{bookings_sandbox.url}/v1/hotel_bookings/{b['id']}")
    assert got.body["status"] == "cancelled"


@pytest.mark.parametrize(
    ("overrides", "param"),
    [
        ({"check_in": "May 1"}, "check_in"),
        ({"check_out": "2026-04-01"}, "check_out"),
        ({"reference": ""}, "reference"),
    ],
)
def test_hotel_validation(bookings_sandbox, overrides, param):
    key = unique()
    reply = book(bookings_sandbox, unique("trip"), key, **overrides)
    assert reply.status == 400 and reply.body["error"]["param"] == param
    assert bookings_sandbox.client.ledger(key=key) == []


def test_key_reuse_with_other_params(bookings_sandbox):
    ref, key = unique("trip"), unique()
    hold(bookings_sandbox, ref, key)
    reply = hold(bookings_sandbox, ref, key, flight="CD456")
    assert reply.status == 400 and reply.body["error"]["type"] == "idempotency_error"


@pytest.mark.usefixtures("clean_faults")
def test_hold_latency_before_effect(bookings_sandbox):
    ref, key = unique("trip"), unique()
    # The client gives up at 0.15 s, the hold lands at 1.5 s: ten times apart.
    bookings_sandbox.client.fault("flight_holds.create", "latency_before_effect", delay=1.5)
    with pytest.raises((TimeoutError, urllib.error.URLError)):
        hold(bookings_sandbox, ref, key, timeout=0.15)
    (entry,) = wait_for(
        lambda: bookings_sandbox.client.ledger(reference=ref), timeout=15, what="late hold"
    )
    found = http_json("GET", f"{bookings_sandbox.url}/v1/flight_holds?reference={ref}")
    assert found.body["data"][0]["id"] == entry["object_id"]


@pytest.mark.usefixtures("clean_faults")
def test_cancel_faults(bookings_sandbox):
    ref = unique("trip")
    b = book(bookings_sandbox, ref, unique()).body
    url = f"{bookings_sandbox.url}/v1/hotel_bookings/{b['id']}/cancel"
    bookings_sandbox.client.fault("hotel_bookings.cancel", "conflict")
    assert http_json("POST", url, {}, key=unique()).status == 409
    bookings_sandbox.client.fault("hotel_bookings.cancel", "reset_before_read")
    with pytest.raises((ConnectionError, urllib.error.URLError, OSError)):
        http_json("POST", url, {}, key=unique())
    assert len(bookings_sandbox.client.ledger(reference=ref)) == 1  # only the booking
    assert http_json("POST", url, {}, key=unique()).body["status"] == "cancelled"


def test_same_key_on_another_object_is_refused(bookings_sandbox):
    a = hold(bookings_sandbox, unique("trip"), unique()).body
    b = hold(bookings_sandbox, unique("trip"), unique()).body
    key = unique()
    base = f"{bookings_sandbox.url}/v1/flight_holds"
    assert http_json("POST", f"{base}/{a['id']}/release", {}, key=key).status == 200
    reply = http_json("POST", f"{base}/{b['id']}/release", {}, key=key)
    assert reply.status == 400 and reply.body["error"]["type"] == "idempotency_error"
    assert http_json("GET", f"{base}/{b['id']}").body["status"] == "held"
