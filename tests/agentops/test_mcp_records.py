"""Intents on real records (issue 38): an invoice as Stripe returns it — it names its customer
(``cus_…``), has line items, a currency and a number — is charged once over MCP, bound to
the customer the record names, however often and however spelt it is asked for.

Driven by the SDK's own client in process (``tests/agentops/mcp_support.py``) against real
PostgreSQL, a real RQ worker and the payments sandbox."""

from __future__ import annotations

import itertools
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client, override_settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from mcp_types import CallToolResult

from agentops.effects import RecordMissing
from agentops.mcp import wire
from agentops.mcp.selectors import Answer, step_answer
from agentops.mcp.services import record_read
from agentops.mcp.wire import ERRORS, REFUSALS
from commerce.customers.links import payment_link
from journal.models import Step, Task
from tests.agentops.mcp_support import Session, data, in_process, mcp_client, run, text
from tests.agentops.test_business_effects import charges_of
from tests.agentops.workers import Fleet
from tests.sandbox.fixtures import SandboxHandle, wait_for

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")

_COUNT = itertools.count(1)


def mixed(number: str) -> str:
    """``number`` with every other letter in small letters (``In-0001``)."""
    return "".join(c.lower() if i % 2 else c for i, c in enumerate(number))


def stripe_invoice(payments: SandboxHandle, **change: Any) -> tuple[str, str]:
    """An open invoice in the system of record as Stripe returns one: its number, its
    customer (``cus_…``) and email, its currency and line items. Its number and customer."""
    # Stripe numbers an invoice with its account's prefix (capitals and digits) and a count;
    # a letter first, so that every prefix has a small-letter spelling to be asked in.
    number = f"A{uuid.uuid4().hex[:7].upper()}-{next(_COUNT):04d}"
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
    # The record's lines, kept for the receipt: on the paid page, in major units.
    assert [line["amount"] for line in task.refs["lines"]] == [9_900, 3_000]
    page = Client().get(payment_link(number, task.pk)).content.decode()
    assert '3 × Extra seat (at €10.00 / month)</td><td class="num">3</td>' in page
    assert '<td class="num">30.00 EUR</td>' in page


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
    # Named as the record spells it, though first asked for in small letters.
    assert number in task.goal and number.lower() not in task.goal
    assert all(f"the charge for invoice {number} " in text(a) for a in answers)


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


# --- One answer, said once: the text says what the fields say --------------------------------


NOW = datetime(2026, 12, 1, 7, 16, 31, tzinfo=UTC)
STEP = "ao:01a243de-80d8-74b1-8100-18e333f19c61:1"
TASK = "01a243de-80d8-74b1-8100-18e333f19c61"
NAMED: dict[str, Any] = {"intent": "charge_invoice", "object": "charge:INV-3001", "noun": "charge"}
ANSWERS = {
    "done": Answer(
        state="done",
        reason="payment pi_1 succeeded",
        reference=STEP,
        task=TASK,
        evidence={"payment_intent": "pi_1", "charge": "ch_1"},
        at=NOW,
        **NAMED,
    ),
    "not_done": Answer(
        state="not_done",
        reason="card_declined: Your card was declined.",
        reference=STEP,
        task=TASK,
        at=NOW,
        **NAMED,
    ),
    "not_done, never attempted": Answer(
        state="not_done", reason=f"task {TASK} ended (finished) without attempting it", **NAMED
    ),
    "unknown, in flight": Answer(
        state="unknown",
        reason="it is being attempted now",
        reference=STEP,
        task=TASK,
        expected_at=NOW,
        waiting_for=f"the provider's answer to {STEP}",
        **NAMED,
    ),
    "unknown, timed out then 409": Answer(
        state="unknown",
        reason="its first call timed out (ReadTimeout): the provider may have processed it; "
        "since then, the provider answered HTTP 409 idempotency_key_in_use",
        reference=STEP,
        task=TASK,
        expected_at=NOW,
        waiting_for=f"the lookup of {STEP} at the provider",
        timed_out=True,
        **NAMED,
    ),
    "unknown, with a person": Answer(
        state="unknown",
        reason="still unknown after 7 rounds",
        reference=STEP,
        task=TASK,
        waiting_for="a person: the lookups did not settle it",
        **NAMED,
    ),
    "waiting, not attempted yet": Answer(
        state="unknown",
        reason=f"task {TASK} was started for it and has not attempted it yet",
        task=TASK,
        expected_at=NOW,
        waiting_for=f"task {TASK} to run",
        **NAMED,
    ),
    "waiting, journal unreadable": Answer(
        state="unknown",
        reason="agentops could not finish answering (OperationalError)",
        waiting_for="agentops' journal to answer again",
        **NAMED,
    ),
    **{
        f"refused: {code}": Answer(
            state="not_done", refused=code, reason=f"{code}; nothing was done", **NAMED
        )
        for code in REFUSALS
    },
}


@pytest.mark.parametrize("subject", ["invoice INV-3001", ""])
@pytest.mark.parametrize("case", list(ANSWERS))
def test_every_answer_says_in_its_text_what_its_fields_say(case: str, subject: str) -> None:
    """For every status an intent (or check_effect) answers: the text starts with the
    structured status and carries the structured reason as it stands, the evidence, the
    reference and the time the answer is expected; a timeout is said in both or neither."""
    result = wire.result(replace(ANSWERS[case], subject=subject))
    fields, said = data(result), text(result)
    assert said.startswith(f"{fields['status']} — "), said
    assert fields["reason"] in said
    if fields["reference"]:
        assert fields["reference"] in said
    if fields["expected_at"]:
        assert "answer expected by 2026-12-01 07:16:31 UTC" in said
    for value in fields["evidence"].values():
        assert value in said
    assert ("timed out" in said) == ("timed out" in fields["reason"])
    assert ("may have happened" in said) == (
        fields["status"] == "unknown" and bool(fields["reference"])
    )
    assert result.is_error == (fields["refused"] in ERRORS)


def test_a_refused_or_missing_record_is_said_alike(
    mcp_world: Fleet, payments_sandbox: SandboxHandle
) -> None:
    """Refusals over MCP (a paid invoice, none by that number): not_done, said alike in the
    text and the fields (``Session`` checks every result so), and nothing is charged."""
    paid, _ = stripe_invoice(payments_sandbox, status="paid")
    name, _ = mcp_client()
    refused, missing = ask(name, [{"invoice": paid.lower()}, {"invoice": f"{paid}9"}])
    assert data(refused)["refused"] == "record_refused" and "is paid" in text(refused)
    assert data(missing)["refused"] == "not_found"
    assert charges_of(payments_sandbox, paid) == []


# --- expected_at ------------------------------------------------------------------------------


def test_expected_at_is_never_before_the_steps_next_check(
    mcp_world: Fleet, payments_sandbox: SandboxHandle
) -> None:
    """The provider holds the charge 4 s; the worker's call gives up after 0.5 s. Whatever the
    answer says while the charge is unknown, it expects the answer no earlier than the step's
    next check, and never at a time already gone — a re-attempt in flight included."""
    number, _ = stripe_invoice(payments_sandbox)
    name, _ = mcp_client()
    payments_sandbox.client.fault("payment_intents.create", "latency_before_effect", delay=4)
    with override_settings(MCP_WAIT_SECONDS=0.2):
        [first] = ask(name, [{"invoice": number}])
    assert data(first)["status"] == "unknown", text(first)
    task = data(first)["task"]
    step = wait_for(
        lambda: Step.objects.filter(task_id=task, kind="call", state="unknown").first(),
        timeout=30,
        interval=0.05,
        what="the charge's call to time out",
    )

    async def poll() -> CallToolResult:
        async with in_process(name) as client:
            return await Session(client).call("check_effect", {"reference": reference})

    reference = step.key
    before = Step.objects.get(pk=step.pk)
    polled = data(run(poll))
    if polled["status"] == "unknown" and before.next_check_at is not None:
        expected = parse_datetime(polled["expected_at"])
        assert expected is not None and expected >= before.next_check_at

    # The step as the journal holds it, read once: the answer is computed from it.
    step = Step.objects.select_related("task").get(pk=step.pk)
    if step.state == "unknown":
        said = step_answer(step)
        assert said.expected_at is not None and step.next_check_at is not None
        assert said.expected_at >= step.next_check_at
    # A check that is overdue (the worker is behind), or a re-attempt in flight whose first
    # attempt started long ago: expected now or later, never at a time gone.
    past = timezone.now() - timedelta(minutes=5)
    overdue = replace_step(step, state="unknown", next_check_at=past)
    expected = step_answer(overdue).expected_at
    assert expected is not None and expected >= timezone.now() - timedelta(seconds=1)
    again = replace_step(step, state="pending", next_check_at=None, first_started_at=past)
    in_flight = step_answer(again)
    assert in_flight.expected_at is not None
    assert in_flight.expected_at >= timezone.now() - timedelta(seconds=1)

    wait_for(
        lambda: Step.objects.filter(pk=step.pk, state="done").exists(),
        timeout=30,
        what="the charge to be found",
    )
    assert len(charges_of(payments_sandbox, number)) == 1


def replace_step(step: Step, **fields: Any) -> Step:
    """A copy of the step, in memory only, with other fields (the journal is not written)."""
    copy = Step.objects.select_related("task").get(pk=step.pk)
    for name, value in fields.items():
        setattr(copy, name, value)
    return copy


def test_a_reminder_first_asked_in_small_letters_is_sent_once_for_the_record(
    mcp_world: Fleet, payments_sandbox: SandboxHandle, mail_sandbox: SandboxHandle
) -> None:
    """``send_payment_reminder`` reads the record the same way: asked first in small letters,
    then as the record spells it, reminder 1 is sent once, to the address the record names,
    referenced by the record's number."""
    number, _ = stripe_invoice(payments_sandbox)
    name, _ = mcp_client()

    async def body() -> list[CallToolResult]:
        async with in_process(name) as client:
            session = Session(client)
            return [
                await session.call("send_payment_reminder", {"invoice": s, "reminder": 1})
                for s in (number.lower(), number)
            ]

    first, again = (data(r) for r in run(body))
    assert first["status"] == again["status"] == "done", first
    assert again["evidence"] == first["evidence"] and again["repeated"] is True
    sent = [
        m
        for m in mail_sandbox.client.ledger(operation="messages.send")
        if (m["params"].get("headers") or {}).get("X-Agentops-Reference") == number
    ]
    assert len(sent) == 1
