"""Two tasks for one invoice: "no new charge until the first is resolved", not "never" (issue 15).

When a renewal meets another task's charge of the same invoice in flight or unknown, it is
refused at once — nothing is sent — and then waits for that charge to settle, and decides
from its outcome: already done → it finishes with the first charge's evidence; not done →
it charges. Before, it finished without charging, and if the first charge was then
declined, the invoice stayed unpaid with both tasks saying they were finished.

Real PostgreSQL, the real tools and a kind's real rules against the sandbox providers.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.models.functions import Now
from django.test import override_settings

from agentops.effects import task_start
from journal.models import Entry, EntryKind, Step, Task
from journal.policy import Policy
from tests.agentops.test_business_effects import charges_of, renewal_refs, run
from tests.agentops.workers import quiet_world
from tests.databases import flag
from tests.journal.support import invoice
from tests.sandbox.fixtures import SandboxHandle, wait_for

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")

SOON = Policy(lookup_schedule=(0.0, 0.0, 0.0, 0.0), max_steps=10)
# Looks its unknown step up half a second later: long enough for another task to meet it.
LATER = Policy(lookup_schedule=(0.5, 0.5, 0.5, 0.5), max_steps=10)
DECLINED = "pm_card_chargeDeclined"


@pytest.fixture
def world(committed: None, on_sandbox: dict[str, Any]) -> Iterator[None]:
    redis = quiet_world()
    with override_settings(**on_sandbox, TOOL_TIMEOUT_SECONDS=1.0, PLANNER="scripted"):
        yield
    redis.flushdb()


def in_thread(task: Task) -> threading.Thread:
    def advance() -> None:
        try:
            run(task, policy=SOON)
        finally:
            connection.close()

    thread = threading.Thread(target=advance)
    thread.start()
    return thread


def charge_of(task: Task) -> list[Step]:
    return list(Step.objects.filter(task=task, tool="charge_customer").order_by("n"))


@pytest.mark.usefixtures("world")
def test_a_renewal_waits_for_a_charge_in_flight_and_charges_once_it_was_declined(
    payments_sandbox: SandboxHandle,
) -> None:
    inv = invoice()
    # The first renewal's card is declined, slowly: its charge is in flight for a while.
    first = task_start(
        kind="renewal", goal="renew", refs=renewal_refs(inv, payment_method=DECLINED)
    )
    payments_sandbox.client.fault("payment_intents.create", "latency_before_effect", delay=0.6)
    slow = in_thread(first)
    wait_for(lambda: [s.state for s in charge_of(first)] == ["pending"], what="a charge in flight")

    # Meanwhile the customer put a working card on file, and a second renewal started.
    second = task_start(kind="renewal", goal="renew with the new card", refs=renewal_refs(inv))
    assert run(second, policy=SOON).stopped == "waiting"
    [refused] = charge_of(second)
    assert (refused.state, refused.refusal) == ("not_done", "in_flight")
    assert Task.objects.get(pk=second.pk).status == "waiting"
    waited = Entry.objects.filter(task=second, kind=EntryKind.TASK_WAITING).latest("id")
    assert charge_of(first)[0].key in waited.data["reason"]

    slow.join(timeout=10)
    assert charge_of(first)[0].state == "not_done"  # declined
    assert Task.objects.get(pk=first.pk).status == "finished"

    assert run(second, policy=SOON).stopped == "finished"
    refused_again, charged = charge_of(second)
    assert refused_again.pk == refused.pk
    assert charged.state == "done" and charged.retries == refused.retries + 1
    assert charged.decision == {"harness": "after_in_flight", "of": refused.n}
    intents = charges_of(payments_sandbox, inv)
    assert [i["status"] for i in intents] == ["requires_payment_method", "succeeded"]
    receipt = Step.objects.get(task=second, tool="send_email")
    assert (receipt.state, receipt.args["purpose"]) == ("done", "receipt")


@pytest.mark.usefixtures("world")
def test_a_renewal_waits_for_an_unknown_charge_and_finishes_when_it_is_found_done(
    payments_sandbox: SandboxHandle, mail_sandbox: SandboxHandle
) -> None:
    inv = invoice()
    first = task_start(kind="renewal", goal="renew", refs=renewal_refs(inv))
    # The provider takes longer than the harness waits: the charge lands after the timeout.
    payments_sandbox.client.fault("payment_intents.create", "latency_after_effect", delay=1.5)
    assert run(first, policy=LATER).stopped == "waiting"
    [unknown] = charge_of(first)
    assert unknown.state == "unknown"

    second = task_start(kind="renewal", goal="renew again", refs=renewal_refs(inv))
    assert run(second, policy=SOON).stopped == "waiting"
    [refused] = charge_of(second)
    assert refused.refusal == "in_flight"

    # It waits until the first charge's lookup is due, not a moment less.
    wake_at = Task.objects.get(pk=second.pk).wake_at
    next_check_at = Step.objects.get(pk=unknown.pk).next_check_at
    assert wake_at is not None and next_check_at is not None and wake_at >= next_check_at
    wait_for(
        lambda: run(first, policy=LATER).stopped == "finished",
        timeout=30,
        what="the first renewal to find its charge and finish",
    )
    paid = charge_of(first)[0]
    assert paid.state == "done"

    wait_for(
        lambda: run(second, policy=SOON).stopped == "finished",
        timeout=30,
        what="the second renewal to decide",
    )
    again = charge_of(second)[-1]
    assert (again.state, again.refusal) == ("not_done", "already_done")
    assert f"charge {paid.evidence['charge']}" in again.detail
    assert again.outcome["first_evidence"] == paid.evidence
    assert "already done" in Step.objects.get(task=second, kind="finish").detail
    assert len(charges_of(payments_sandbox, inv)) == 1
    receipts = [
        m
        for m in mail_sandbox.client.ledger()
        if m["params"]["headers"]["X-Agentops-Reference"] == inv
    ]
    assert len(receipts) == 1


@pytest.mark.usefixtures("world")
def test_a_renewal_blocked_by_a_charge_with_a_person_backs_off_instead_of_spinning(
    payments_sandbox: SandboxHandle,
) -> None:
    """The first charge is unknown and its task went to a person: nothing will look it up
    until they act. The second renewal waits, longer each time, never in a tight loop."""
    inv = invoice()
    first = task_start(kind="renewal", goal="renew", refs=renewal_refs(inv))
    payments_sandbox.client.fault("payment_intents.create", "latency_after_effect", delay=1.5)
    one_round = Policy(lookup_schedule=(30.0,), max_steps=10)
    assert run(first, policy=one_round).stopped == "waiting"
    flag(first.pk, "parked", "an operator looks into it")

    backing_off = Policy(lookup_schedule=(0.2, 0.4, 0.8), max_steps=10)
    second = task_start(kind="renewal", goal="renew again", refs=renewal_refs(inv))
    waits = []
    for _ in range(3):
        wait_for(
            lambda: (
                run(second, policy=backing_off).stopped == "waiting"
                and Task.objects.get(pk=second.pk).wake_at is not None
            ),
            what="the blocked renewal to wait",
        )
        task = Task.objects.get(pk=second.pk)
        assert task.wake_at is not None
        waits.append(task.wake_at)
        wait_for(
            lambda: Task.objects.filter(pk=second.pk, wake_at__lte=Now()).exists(),
            timeout=5,
            what="its wake-up time",
        )
    gaps = [(b - a).total_seconds() for a, b in zip(waits, waits[1:], strict=False)]
    assert all(gap >= 0.2 for gap in gaps), gaps
    assert Step.objects.filter(task=second, tool="charge_customer").count() == 1
    assert Task.objects.get(pk=second.pk).status == "waiting"
