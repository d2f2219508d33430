"""Agents on real RQ workers: crashes, a lost Redis, slow providers, guards (issue 4).

Real worker processes (non-forking SimpleWorker, with RQ's scheduler), a real sweeper,
real PostgreSQL and Redis, and the sandbox providers. Time is shrunk: tool calls time out
after 0.5 s, leases last 2 s, lookups come 0.2 s apart.
"""

from __future__ import annotations

import signal
from typing import Any

import django_rq
import pytest

from agentops.effects import task_start
from devtools.chaos.kill import armed
from journal.models import Entry, EntryKind, Step, Task
from journal.selectors import task_facts
from tests.agentops.workers import Fleet, restart_server
from tests.journal.support import invoice
from tests.sandbox.fixtures import SandboxHandle, wait_for

pytestmark = pytest.mark.usefixtures("committed")


def renewal(**refs: Any) -> Task:
    inv = refs.pop("invoice", invoice())
    return task_start(
        kind="renewal",
        goal=f"Renew the subscription: charge {inv}, email the receipt",
        refs={
            "invoice": inv,
            "amount": 4900,
            "currency": "usd",
            "email": "ada@example.com",
            **refs,
        },
    )


def finished(task: Task, timeout: float = 60) -> Task:
    """The task once it has ended. The slowest of these tests takes some 5 s in all: a minute
    is more than ten times that, and still a small part of a lease when a test needs one."""
    wait_for(
        lambda: Task.objects.get(pk=task.pk).status in ("finished", "needs_human"),
        timeout=timeout,
        interval=0.05,
        what=f"task {task.pk} to end",
    )
    return Task.objects.get(pk=task.pk)


def effects(task: Task, payments: SandboxHandle, mail: SandboxHandle) -> dict[str, int]:
    """How many times the provider really performed each of the task's steps."""
    counts = {}
    for step in Step.objects.filter(task=task, kind="call"):
        provider = payments if step.tool == "charge_customer" else mail
        counts[step.tool] = len(provider.client.ledger(key=step.key))
    return counts


def test_a_renewal_runs_to_the_end_on_a_worker(
    fleet: Fleet, payments_sandbox: SandboxHandle, mail_sandbox: SandboxHandle
) -> None:
    fleet.worker()
    task = finished(renewal())
    assert task.status == "finished"
    assert effects(task, payments_sandbox, mail_sandbox) == {"charge_customer": 1, "send_email": 1}
    facts = task_facts(task=task)
    assert [s.state for s in facts.steps] == ["done", "done"]


@pytest.mark.parametrize(
    ("point", "tool"),
    [
        ("before_call", "charge_customer"),
        ("during_call", "charge_customer"),
        # The charge answered; its settlement is held back to go with the email's record.
        ("after_call", "charge_customer"),
        # That one commit made: the charge settled, the email recorded, not yet sent.
        ("before_call", "send_email"),
        # The email answered; its settlement is held back to go with the finish.
        ("after_call", "send_email"),
    ],
)
def test_a_worker_killed_at_each_boundary_loses_nothing_and_repeats_nothing(
    fleet: Fleet,
    payments_sandbox: SandboxHandle,
    mail_sandbox: SandboxHandle,
    point: str,
    tool: str,
) -> None:
    if point == "during_call":
        # The request is in flight for 1 s; the worker dies 0.1 s into it; the effect lands.
        payments_sandbox.client.fault("payment_intents.create", "latency_before_effect", delay=1.0)
    doomed = fleet.worker(**armed(f"{point}:{tool}"))
    task = renewal()
    assert doomed.wait(timeout=30) == -signal.SIGKILL
    steps = {s.tool: s.state for s in Step.objects.filter(task=task, kind="call")}
    # Recorded, attempt started, no outcome (unknown to anyone but the provider); whatever
    # came before it committed.
    assert steps[tool] == "pending", steps
    if tool == "send_email":
        assert steps["charge_customer"] == "done", steps
    charge = Step.objects.get(task=task, n=1)

    fleet.worker()
    fleet.sweeper()
    task = finished(task)
    assert task.status == "finished"
    assert effects(task, payments_sandbox, mail_sandbox) == {"charge_customer": 1, "send_email": 1}
    charge.refresh_from_db()
    assert charge.state == "done"


def test_redis_emptied_mid_run_the_sweeper_brings_every_task_to_an_end(
    fleet: Fleet, payments_sandbox: SandboxHandle, mail_sandbox: SandboxHandle
) -> None:
    payments_sandbox.client.fault(
        "payment_intents.create", "latency_before_effect", delay=0.3, times=None
    )
    tasks = [renewal() for _ in range(8)]
    fleet.worker()
    fleet.worker()
    wait_for(
        lambda: Step.objects.filter(task__in=tasks).count() >= 3,
        timeout=30,
        what="the run to be under way",
    )
    django_rq.get_connection("default").flushdb()  # every queued and scheduled job is gone
    fleet.sweeper()
    ends = [finished(t, timeout=60) for t in tasks]
    assert [t.status for t in ends] == ["finished"] * len(tasks)
    for task in ends:
        counts = effects(task, payments_sandbox, mail_sandbox)
        assert counts == {"charge_customer": 1, "send_email": 1}, (task.pk, counts)


def test_the_six_second_charge_end_to_end(
    fleet: Fleet, payments_sandbox: SandboxHandle, mail_sandbox: SandboxHandle
) -> None:
    # The client gives up at 0.5 s; the charge lands at 1.5 s.
    payments_sandbox.client.fault("payment_intents.create", "latency_before_effect", delay=1.5)
    fleet.worker()
    task = renewal()
    wait_for(
        lambda: Task.objects.get(pk=task.pk).status == "waiting",
        timeout=30,
        what="the charge to go unknown and the task to wait",
    )
    task = finished(task)
    assert task.status == "finished"
    charge = Step.objects.get(task=task, n=1)
    states = list(
        Entry.objects.filter(step=charge, kind=EntryKind.STEP_SETTLED)
        .order_by("id")
        .values_list("data__state", flat=True)
    )
    assert states[0] == "unknown" and states[-1] == "done"
    assert effects(task, payments_sandbox, mail_sandbox) == {"charge_customer": 1, "send_email": 1}
    receipt = Step.objects.get(task=task, n=2)
    assert receipt.tool == "send_email" and receipt.args["subject"].startswith("Receipt")


def test_a_second_charge_while_the_first_is_unknown_waits_for_it_and_is_told_what_it_did(
    fleet: Fleet, payments_sandbox: SandboxHandle, mail_sandbox: SandboxHandle
) -> None:
    payments_sandbox.client.fault("payment_intents.create", "latency_before_effect", delay=3.0)
    fleet.worker()
    inv = invoice()
    first = renewal(invoice=inv)
    wait_for(
        lambda: Task.objects.get(pk=first.pk).status == "waiting",
        timeout=20,
        what="the first charge to be unknown",
    )
    second = finished(renewal(invoice=inv))
    refused = Step.objects.get(task=second, n=1)
    assert (refused.state, refused.refusal) == ("not_done", "in_flight")
    text = task_facts(task=second).steps[0].result_text()
    assert f"refused: another charge_customer on {inv} is in flight or unknown" in text
    # It waited for the first charge to settle, then was told what became of it.
    first = finished(first)
    paid = Step.objects.get(task=first, tool="charge_customer")
    told = Step.objects.get(task=second, n=2)
    assert (told.state, told.refusal) == ("not_done", "already_done")
    assert f"charge {paid.evidence['charge']}" in told.detail
    finish = Step.objects.get(task=second, kind="finish")
    assert "already paid" in finish.outcome["planner_summary"]
    # The summary tells the outcome, not the wait: the retry stands for the first refusal.
    assert finish.detail.startswith(f"1 refused. Refused: charge_customer for {inv} — already")
    assert payments_sandbox.client.ledger(key=refused.key) == []
    assert payments_sandbox.client.ledger(key=told.key) == []
    assert effects(first, payments_sandbox, mail_sandbox) == {"charge_customer": 1, "send_email": 1}


@pytest.mark.stack("postgres")
def test_a_postgresql_restart_mid_run_hands_the_task_on_at_once_not_after_its_lease(
    fleet: Fleet, payments_sandbox: SandboxHandle, mail_sandbox: SandboxHandle
) -> None:
    # The charge is in flight for 2 s (the client gives up at 0.5 s); meanwhile PostgreSQL
    # restarts, so the runner cannot record what it saw. Its lease would hold the task for
    # 10 minutes; it gives it back as soon as the database answers, and rings for it again.
    # So the task ends within the minute `finished` waits (it takes a few seconds) only if
    # it was handed on: the lease is ten times that wait, the wait ten times the run.
    payments_sandbox.client.fault("payment_intents.create", "latency_before_effect", delay=2.0)
    fleet.worker(JOURNAL_LEASE_SECONDS="600")
    task = renewal()
    wait_for(
        lambda: Step.objects.filter(task=task, n=1, state="pending").exists(),
        timeout=20,
        what="the charge to be in flight",
    )
    restart_server("postgres")
    task = finished(task, timeout=60)
    assert task.status == "finished" and task.failed_runs == 0
    assert effects(task, payments_sandbox, mail_sandbox) == {"charge_customer": 1, "send_email": 1}
    # The step recorded before the crash is the one that settled: nothing was decided twice.
    assert Step.objects.get(task=task, n=1).state == "done"
    assert not Step.objects.filter(task=task, refusal__gt="").exists()
