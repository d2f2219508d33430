"""Intents on real records (issue 38): an invoice as Stripe returns it — it names its customer
(``cus_…``), has line items, a currency and a number — is charged once over MCP, bound to
the customer the record names, however often and however spelt it is asked for.

Driven by the SDK's own client in process (``tests/agentops/mcp_support.py``) against real
PostgreSQL, a real RQ worker and the payments sandbox."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest
from django.test import override_settings
from mcp_types import CallToolResult

from agentops.effects import RecordMissing
from agentops.mcp.services import record_read
from journal.models import Task
from tests.agentops.mcp_support import Session, data, in_process, mcp_client, run, text
from tests.agentops.test_business_effects import charges_of
from tests.agentops.workers import Fleet
from tests.sandbox.fixtures import SandboxHandle

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")

_COUNT = itertools.count(1)


def mixed(number: str) -> str:
    """``number`` with every other letter in small letters (``In-0001``)."""
    return "".join(c.lower() if i % 2 else c for i, c in enumerate(number))


def stripe_invoice(payments: SandboxHandle, **change: Any) -> tuple[str, str]:
    """An open invoice in the system of record as Stripe returns one: its number, its
    customer (``cus_…``) and email, its currency and line items. Its number and customer."""
    # Stripe numbers an invoice with its account's prefix (capitals and digits) and a count.
    number = f"{uuid.uuid4().hex[:8].upper()}-{next(_COUNT):04d}"
    customer = f"cus_{uuid.uuid4().hex[:14]}"
    fields = {
        "number": number,
        "customer": customer,
        "customer_email": "grace@example.com",
        "currency": "eur",
        "amount_due": 12_900,
        "status": "open",
        "lines": [
            {
                "amount": 9_900,
                "currency": "eur",
                "description": "1 × Team plan (at €99.00 / month)",
                "quantity": 1,
            },
            {
                "amount": 3_000,
                "currency": "eur",
                "description": "3 × Extra seat (at €10.00 / month)",
                "quantity": 3,
            },
        ],
    }
    payments.client.invoice(**{**fields, **change})
    return number, customer


def ask(name: str, calls: list[dict[str, Any]]) -> list[CallToolResult]:
    """Each call of ``charge_invoice`` in its own session (a reconnect, a cleared context)."""
    answers: list[CallToolResult] = []

    async def body() -> None:
        for args in calls:
            async with in_process(name) as client:
                answers.append(await Session(client).call("charge_invoice", args))

    run(body)
    return answers


def test_an_invoice_naming_its_customer_is_charged_once_to_that_customer(
    mcp_world: Fleet, payments_sandbox: SandboxHandle
) -> None:
    """The record names ``cus_…``: the charge is bound to it and made for it, once; asked
    again, the answer is the same charge and no new task starts."""
    number, customer = stripe_invoice(payments_sandbox)
    name, _ = mcp_client()
    first, again = ask(name, [{"invoice": number}, {"invoice": number}])
    one, two = data(first), data(again)
    assert one["status"] == "done", text(first)
    assert one["evidence"]["payment_intent"].startswith("pi_")
    assert two["status"] == "done" and two["repeated"] is True
    assert two["evidence"] == one["evidence"] and two["task"] == one["task"]

    [charge] = charges_of(payments_sandbox, number)
    assert charge["params"]["customer"] == customer
    assert int(charge["params"]["amount"]) == 12_900 and charge["params"]["currency"] == "eur"
    [task] = Task.objects.filter(refs__invoice=number)
    assert task.refs["customer"] == customer


def test_any_spelling_of_the_number_finds_the_record_and_charges_it_once(
    mcp_world: Fleet, payments_sandbox: SandboxHandle
) -> None:
    """In small letters (asked first, before any charge stands), with spaces around it, in
    mixed case, as the record spells it, with a zero-width space: each finds the record and
    lands on its one charge."""
    number, customer = stripe_invoice(payments_sandbox)
    spellings = [number.lower(), f"  {number} ", mixed(number), number, f"{number.lower()}\u200b"]
    name, _ = mcp_client()
    answers = ask(name, [{"invoice": s} for s in spellings])
    said = [data(a) for a in answers]
    assert [s["status"] for s in said] == ["done"] * len(spellings), [text(a) for a in answers]
    assert {s["task"] for s in said} == {said[0]["task"]}
    assert [s["repeated"] for s in said] == [False] + [True] * (len(spellings) - 1)
    assert all(s["evidence"] == said[0]["evidence"] for s in said)

    [charge] = charges_of(payments_sandbox, number)
    # Charged as the record spells it, for the customer it names.
    assert charge["params"]["metadata"]["invoice"] == number
    assert charge["params"]["customer"] == customer
    [task] = Task.objects.filter(refs__invoice=number)
    assert task.refs["invoice"] == number


def test_the_record_is_read_by_any_spelling(
    payments_sandbox: SandboxHandle, on_sandbox: dict[str, Any]
) -> None:
    """``look_up_invoice`` (what an intent and the MCP READ tool read through) finds the
    invoice whatever the case or the white space around its number; another number is not
    found."""
    number, customer = stripe_invoice(payments_sandbox)
    with override_settings(**on_sandbox):
        for spelling in (number.lower(), f" {number} ", mixed(number), number):
            record = record_read(tool="look_up_invoice", args={"invoice": spelling})
            assert record["number"] == number and record["customer"] == customer
        with pytest.raises(RecordMissing):
            record_read(tool="look_up_invoice", args={"invoice": f"{number}9"})
