"""Intents on real records (issue 38): an invoice as Stripe returns it — it names its customer
(``cus_…``), has line items, a currency and a number — is charged once over MCP, bound to
the customer the record names, however often and however spelt it is asked for.

Driven by the SDK's own client in process (``tests/agentops/mcp_support.py``) against real
PostgreSQL, a real RQ worker and the payments sandbox."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from mcp_types import CallToolResult

from journal.models import Task
from tests.agentops.mcp_support import Session, data, in_process, mcp_client, run, text
from tests.agentops.test_business_effects import charges_of
from tests.agentops.workers import Fleet
from tests.journal.support import invoice
from tests.sandbox.fixtures import SandboxHandle

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")


def stripe_invoice(payments: SandboxHandle, **change: Any) -> tuple[str, str]:
    """An open invoice in the system of record as Stripe returns one: its number, its
    customer (``cus_…``) and email, its currency and line items. Its number and customer."""
    number = invoice()
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
