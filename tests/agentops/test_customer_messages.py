"""What a customer is told when no task of their payment runs again (issue 38): a trip or a
renewal an operator cancelled outright, a payment refunded at the provider's dashboard that
the provider audit finds — each one message, by a keyed task of its own kind
(``customer_notice``), counted at the mail sandbox's ledger — and the card a payment was made
with on the receipt. Real PostgreSQL and the sandbox providers, each a process of its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from agentops.audit.models import Finding
from agentops.audit.services import FindingRefused, _effect_of, audit_run, finding_resolve
from agentops.effects import task_start
from agentops.kinds import followup_start, kinds, tools_for
from agentops.operators.services import task_cancel
from agentops.runner import task_run
from commerce.customers.links import NOTICE_KIND, payment_link
from commerce.intents import record_lines
from journal.leases import lease_acquire, lease_release
from journal.models import Step, Task
from journal.perform import step_perform
from journal.protocols import Call
from journal.record import step_record
from journal.selectors import task_facts_by_id
from journal.status import TransitionRefused
from tests.agentops.test_business_effects import renewal_refs, trip_refs
from tests.agentops.test_operators import client_for, user
from tests.agentops.workers import quiet_world
from tests.databases import flag
from tests.journal.support import invoice
from tests.sandbox.fixtures import SandboxHandle

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")

OVER = ("finished", "compensated", "cancelled", "needs_human", "awaiting_approval")


@pytest.fixture
def world(on_sandbox: dict[str, Any]) -> Iterator[None]:
    redis = quiet_world()
    with override_settings(**on_sandbox, TOOL_TIMEOUT_SECONDS=2.0, PLANNER="scripted"):
        yield
    redis.flushdb()


def run(task: Task, timeout: float = 30) -> Task:
    """Run the task as a worker would, in this process, until it is over."""
    deadline = time.monotonic() + timeout
    while True:
        task_run(task_id=task.pk)
        task = Task.objects.get(pk=task.pk)
        if task.status in OVER:
            return task
        assert time.monotonic() < deadline, f"task {task.pk} still {task.status}"
        time.sleep(0.05)


def messages(mail: SandboxHandle, inv: str, purpose: str) -> list[dict[str, Any]]:
    """The messages the mail provider accepted about ``inv`` for ``purpose``, whoever sent."""
    found = []
    for entry in mail.client.ledger(operation="messages.send"):
        headers = entry["params"].get("headers") or {}
        if (
            headers.get("X-Agentops-Reference") == inv
            and headers.get("X-Agentops-Purpose") == purpose
        ):
            found.append(entry)
    return found


def operators_client() -> Client:
    return client_for(user("Operators"))


def notices(inv: str) -> list[Task]:
    return list(Task.objects.filter(kind=NOTICE_KIND, refs__invoice=inv))


def held_and_let_go(inv: str) -> Task:
    """A trip that held its flight at the bookings sandbox and released it again (its own
    keyed undo), then went to a person: what an operator then cancels outright."""
    task = task_start(kind="trip", goal="a trip", refs=trip_refs(inv))
    lease = lease_acquire(task_id=task.pk, owner="test")
    assert lease is not None
    tools = tools_for(task)
    hold = step_record(
        lease=lease,
        decision=Call("hold_flight", {"flight": "TP1351", "passenger": f"Alan {inv}"}),
        tools=tools,
    )
    step_perform(lease=lease, step=hold, tool=tools["hold_flight"])
    target = task_facts_by_id(task_id=task.pk).steps[0]
    assert target.state == "done", target.detail
    release = step_record(
        lease=lease,
        decision=Call(
            "release_flight", tools["hold_flight"].undo_args(target.args, target.evidence)
        ),
        tools=tools,
        undo_of=target,
    )
    step_perform(lease=lease, step=release, tool=tools["release_flight"])
    lease_release(lease)
    assert flag(task.pk, "planner_failed", "the model was down")
    return task


# --- An operator cancels a task outright ------------------------------------------------------


def test_a_trip_cancelled_after_its_holds_tells_the_traveller_once(
    world: None, mail_sandbox: SandboxHandle
) -> None:
    inv = invoice()
    task = held_and_let_go(inv)

    notice = task_cancel(task_id=task.pk, actor="ops", reason="the traveller changed plans")
    assert notice is not None and notice.kind == NOTICE_KIND
    assert Task.objects.get(pk=task.pk).status == "cancelled"
    assert run(notice).status == "finished"
    (sent,) = messages(mail_sandbox, inv, "cancellation")
    body = sent["params"]["body"]
    assert sent["params"]["to"] == "alan@example.com"
    assert sent["params"]["subject"] == f"Your trip {inv} was cancelled"
    assert "flight TP1351 and the hotel Alfama" in body and "no longer held" in body
    assert "Nothing is owed" in body and "No money has been taken" in body
    assert "The cancelled trip and its payment: " in body and "/pay/" in body  # its page

    # A second cancel is refused and starts nothing; the notice run again, or named again,
    # sends nothing more; even a notice started by hand is refused by the email's guard.
    with pytest.raises(TransitionRefused):
        task_cancel(task_id=task.pk, actor="ops", reason="again")
    run(notice)
    follow = kinds()["trip"].on_cancel(task.refs, task_facts_by_id(task_id=task.pk))  # type: ignore[misc]
    assert follow is not None and followup_start(follow, actor="ops") is None
    again = task_start(kind=NOTICE_KIND, goal="by hand", refs=dict(follow.refs))
    assert run(again).status == "finished"
    assert len(notices(inv)) == 2 and len(messages(mail_sandbox, inv, "cancellation")) == 1


def test_a_task_the_customer_never_heard_of_is_cancelled_without_a_message(
    world: None, mail_sandbox: SandboxHandle
) -> None:
    trip, renewal = invoice(), invoice()
    for kind, refs in (("trip", trip_refs(trip)), ("renewal", renewal_refs(renewal))):
        task = task_start(kind=kind, goal="nothing done yet", refs=refs)
        assert flag(task.pk, "planner_failed", "the model was down")
        assert task_cancel(task_id=task.pk, actor="ops", reason="not wanted") is None
    assert notices(trip) == notices(renewal) == []


def test_a_declined_renewal_cancelled_tells_the_customer_the_link_takes_no_payment(
    world: None, mail_sandbox: SandboxHandle
) -> None:
    inv = invoice()
    refs = renewal_refs(inv, payment_method="pm_card_chargeDeclined")
    task = task_start(kind="renewal", goal="renew", refs=refs)
    lease = lease_acquire(task_id=task.pk, owner="test")
    assert lease is not None
    tools = tools_for(task)
    charge = step_record(
        lease=lease,
        decision=Call(
            "charge_customer",
            {
                "invoice": inv,
                "amount": 4900,
                "currency": "usd",
                "payment_method": refs["payment_method"],
            },
        ),
        tools=tools,
    )
    step_perform(lease=lease, step=charge, tool=tools["charge_customer"])
    told = step_record(
        lease=lease,
        decision=Call(
            "send_email",
            {
                "to": "ada@example.com",
                "subject": f"Payment for {inv} did not go through",
                "body": "Your card was declined.",
                "reference": inv,
                "purpose": "payment_failed",
            },
        ),
        tools=tools,
    )
    step_perform(lease=lease, step=told, tool=tools["send_email"])
    lease_release(lease)
    assert flag(task.pk, "planner_failed", "the model was down")

    notice = task_cancel(task_id=task.pk, actor="ops", reason="the customer left")
    assert notice is not None
    run(notice)
    run(notice)
    (sent,) = messages(mail_sandbox, inv, "cancellation")
    assert sent["params"]["subject"] == f"{inv} was cancelled"
    assert "The payment of 49.00 USD for" in sent["params"]["body"]
    assert "No money has been taken" in sent["params"]["body"]
    page = Client().get(payment_link(inv, task.pk)).content.decode()
    assert "This payment was cancelled" in page  # the notice is not the payment's latest word


# --- A refund made at the provider's dashboard, found by the audit ---------------------------


def test_a_refund_the_audit_finds_is_emailed_once_keyed_by_the_refund(
    world: None, payments_sandbox: SandboxHandle, mail_sandbox: SandboxHandle
) -> None:
    since: datetime = timezone.now()
    inv = invoice()
    task = run(task_start(kind="renewal", goal="renew", refs=renewal_refs(inv)))
    assert task.status == "finished", task.attention
    charge = Step.objects.get(task=task, tool="charge_customer", kind="call")
    refund = payments_sandbox.client.refund_from_dashboard(charge.evidence["payment_intent"])

    for _ in range(2):  # audited twice: found once
        report = audit_run(provider="stripe", since=since, until=timezone.now(), trigger="command")
        assert not report.error, report.error
    (finding,) = Finding.objects.filter(step=charge)
    assert finding.effect_id == refund["id"]
    assert finding.provider_side["undone_by"] == [refund["id"]]
    # The page says Refunded at once; the audit (the worker role) starts no task: the person
    # who resolves the finding has the customer told.
    page = Client().get(payment_link(inv, task.pk)).content.decode()
    assert '<h1 id="payment-title">Refunded</h1>' in page
    assert notices(inv) == []
    finding_resolve(finding_id=finding.pk, actor="ops", reason="refunded by support")
    with pytest.raises(FindingRefused):
        finding_resolve(finding_id=finding.pk, actor="ops", reason="again")

    (notice,) = notices(inv)
    assert notice.refs["refund"] == refund["id"] and notice.refs["purpose"] == "refund"
    assert run(notice).status == "finished"
    run(notice)
    assert (
        audit_run(provider="stripe", since=since, until=timezone.now(), trigger="command").found
        == 0
    )
    # Named again for the same refund (another finding of it, say): not started again.
    follow = kinds()["renewal"].on_undone_elsewhere(  # type: ignore[misc]
        task.refs, task_facts_by_id(task_id=task.pk), _effect_of(finding)
    )
    assert follow is not None and followup_start(follow, actor="ops") is None
    (sent,) = messages(mail_sandbox, inv, "refund")
    assert len(notices(inv)) == 1
    assert sent["params"]["subject"] == f"Refund for {inv}"
    assert f"We refunded your payment of 49.00 USD for {inv} in full." in sent["params"]["body"]
    assert "Your payment and its refund: " in sent["params"]["body"]


def test_each_partial_refund_the_audit_finds_is_emailed_once_with_its_own_amount(
    world: None, payments_sandbox: SandboxHandle, mail_sandbox: SandboxHandle
) -> None:
    since: datetime = timezone.now()
    inv = invoice()
    task = run(task_start(kind="renewal", goal="renew", refs=renewal_refs(inv)))
    assert task.status == "finished", task.attention
    charge = Step.objects.get(task=task, tool="charge_customer", kind="call")
    intent = charge.evidence["payment_intent"]
    first = payments_sandbox.client.refund_from_dashboard(intent, amount=1000)
    audit_run(provider="stripe", since=since, until=timezone.now(), trigger="command")
    (found,) = Finding.objects.filter(step=charge)
    finding_resolve(finding_id=found.pk, actor="ops", reason="10.00 back, as agreed")

    # A second partial refund of the same payment, after the first was told: news of its own.
    second = payments_sandbox.client.refund_from_dashboard(intent, amount=1500)
    for _ in range(2):
        audit_run(provider="stripe", since=since, until=timezone.now(), trigger="command")
    findings = Finding.objects.filter(step=charge).order_by("id")
    assert [f.effect_id for f in findings] == [first["id"], second["id"]]
    later = findings[1]
    assert later.is_open
    # Its page says which refund it is about, beside the payment's whole refunded amount.
    shown = operators_client().get(f"/audit/{later.pk}").content.decode()
    assert f"happened, then refunded 25.00 USD ({second['id']} found here)" in shown
    finding_resolve(finding_id=later.pk, actor="ops", reason="15.00 more, as agreed")
    with pytest.raises(FindingRefused):
        finding_resolve(finding_id=later.pk, actor="ops", reason="again")

    told = {n.refs["refund"]: n for n in notices(inv)}
    assert set(told) == {first["id"], second["id"]}
    for notice in told.values():
        assert run(notice).status == "finished"
        run(notice)  # run again: nothing more is sent
    sent = messages(mail_sandbox, inv, "refund")
    assert len(sent) == 2
    bodies = sorted(m["params"]["body"] for m in sent)
    assert f"We refunded 10.00 USD of your payment of 49.00 USD for {inv}." in bodies[0]
    assert f"We refunded 15.00 USD of your payment of 49.00 USD for {inv}." in bodies[1]
    # The page says what was refunded in all.
    page = Client().get(payment_link(inv, task.pk)).content.decode()
    assert "25.00" in page


# --- The card on the receipt ------------------------------------------------------------------


def test_the_receipt_says_the_card_by_its_brand_and_last_four_digits(world: None) -> None:
    inv = invoice()
    refs = renewal_refs(inv, payment_method="pm_card_mastercard")
    task = run(task_start(kind="renewal", goal="renew", refs=refs))
    assert task.status == "finished", task.attention
    charge = Step.objects.get(task=task, tool="charge_customer", kind="call")
    assert charge.evidence["card_brand"] == "mastercard"
    assert charge.evidence["card_last4"] == "4444"
    # The evidence keeps the card's brand and last four digits, nothing else of it.
    assert not {"payment_method_details", "card", "fingerprint", "exp_month"} & set(charge.evidence)
    assert isinstance(charge.evidence["charge"], str)  # the charge's id, not the object

    page = Client().get(payment_link(inv, task.pk)).content.decode()
    assert "<dt>Paid with</dt><dd>Mastercard ending 4444</dd>" in page
    assert "receipt-lines" not in page  # its task named no lines: none shown


# --- The invoice's lines on the receipt -------------------------------------------------------


def test_the_invoices_lines_are_taken_from_the_record_as_stripe_lists_them() -> None:
    record = {
        "number": "INV-1",
        "lines": {
            "object": "list",
            "data": [
                {
                    "id": "il_1",
                    "object": "line_item",
                    "amount": 9_900,
                    "currency": "eur",
                    "description": "1 × Team plan",
                    "quantity": 1,
                },
                {
                    "id": "il_2",
                    "object": "line_item",
                    "amount": 3_000,
                    "currency": "eur",
                    "description": "3 × Extra\nseat\u2028",
                    "quantity": 3,
                },
                {"id": "il_3", "object": "line_item", "amount": -500, "description": None},
            ],
        },
    }
    assert record_lines(record) == [
        {"description": "1 × Team plan", "amount": 9_900, "quantity": 1},
        {"description": "3 × Extra seat", "amount": 3_000, "quantity": 3},
        {"description": "", "amount": -500},
    ]
    # A line without an integer amount: the receipt shows no lines rather than some.
    assert record_lines({"lines": {"data": [{"amount": "9900"}]}}) == []
    assert record_lines({"lines": {"data": [{"amount": 1}] * 101}}) == []
    assert record_lines({}) == []


def test_the_receipt_lists_the_invoices_lines_in_major_units(world: None) -> None:
    inv = invoice()
    lines = [
        {"description": "1 × Team plan (at €39.00 / month)", "quantity": 1, "amount": 3_900},
        {"description": "<b>Seat</b>", "quantity": 2, "amount": 1_000},
    ]
    refs = {**renewal_refs(inv), "currency": "eur", "lines": lines}
    task = run(task_start(kind="renewal", goal="renew", refs=refs))
    assert task.status == "finished", task.attention
    page = Client().get(payment_link(inv, task.pk)).content.decode()
    assert "<caption>What you paid for</caption>" in page
    assert (
        '<tr><td>1 × Team plan (at €39.00 / month)</td><td class="num">1</td>'
        '<td class="num">39.00 EUR</td></tr>'
    ) in page
    # The record's words are text, never markup.
    assert (
        '<td>&lt;b&gt;Seat&lt;/b&gt;</td><td class="num">2</td><td class="num">10.00 EUR</td>'
        in page
    )
    assert '<th scope="row" colspan="2">Total</th><td class="num">49.00 EUR</td>' in page
    # Lines a task was started with must be the record's shape: anything else is refused.
    with pytest.raises(ValueError, match="lines"):
        task_start(
            kind="renewal",
            goal="renew",
            refs={**renewal_refs(invoice()), "lines": [{"description": "x", "amount": 1.5}]},
        )
