"""One state machine for a task's status (journal/status.py), backed by PostgreSQL."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.db import IntegrityError, transaction
from django.db.models.functions import Now

from journal.leases import lease_acquire
from journal.models import Attention, Entry, EntryKind, Step, Task, TaskStatus
from journal.operator import task_cancel, task_resume
from journal.protocols import Finish
from journal.record import step_record, task_create, task_finish
from journal.status import TRANSITIONS, TransitionRefused, task_flag, task_transition
from tests.journal.support import ChargeTool, Provider, charge, invoice

pytestmark = pytest.mark.usefixtures("committed")

ROOT = Path(__file__).resolve().parents[2]


def task_in(status: TaskStatus) -> Task:
    """A task brought to ``status`` the legal way."""
    task = task_create(kind="renewal", goal=f"to be {status}")
    if status == TaskStatus.WAITING:
        task_transition(task_id=task.pk, to=TaskStatus.WAITING, wake_in=0)
    if status in (TaskStatus.NEEDS_HUMAN, TaskStatus.CANCELLED):
        task_flag(task_id=task.pk, code=Attention.PARKED, reason="set aside")
    if status == TaskStatus.CANCELLED:
        task_transition(task_id=task.pk, to=TaskStatus.CANCELLED)
    if status == TaskStatus.FINISHED:
        task_transition(task_id=task.pk, to=TaskStatus.FINISHED)
    if status in (TaskStatus.AWAITING_APPROVAL, TaskStatus.COMPENSATED):
        task_transition(task_id=task.pk, to=status)
    task.refresh_from_db()
    assert task.status == status
    return task


@pytest.mark.parametrize("frm", list(TaskStatus))
@pytest.mark.parametrize("to", list(TaskStatus))
def test_the_database_allows_exactly_the_transitions_of_the_table(
    frm: TaskStatus, to: TaskStatus
) -> None:
    task = task_in(frm)
    allowed = to == frm or to in TRANSITIONS[frm]
    try:
        with transaction.atomic():
            # A plain UPDATE, as code that bypassed journal.status would write it.
            Task.objects.filter(pk=task.pk).update(
                status=to, wake_at=Now(), attention_code=Attention.PARKED, attention="x"
            )
        moved = True
    except IntegrityError as exc:
        assert "is not a transition of its state machine" in str(exc)
        moved = False
    assert moved == allowed


def test_a_waiting_task_always_has_a_wake_up_time_and_a_flagged_one_a_code() -> None:
    task = task_create(kind="renewal", goal="g")
    with pytest.raises(IntegrityError), transaction.atomic():
        Task.objects.filter(pk=task.pk).update(status=TaskStatus.WAITING)
    with pytest.raises(IntegrityError), transaction.atomic():
        Task.objects.filter(pk=task.pk).update(status=TaskStatus.NEEDS_HUMAN, attention="why")


def test_every_transition_is_one_entry_with_from_to_who_and_why() -> None:
    task = task_create(kind="renewal", goal="g")
    assert task_flag(task_id=task.pk, code=Attention.CONFLICT, reason="two reports", actor="x")
    [flagged] = Entry.objects.filter(task=task, kind=EntryKind.TASK_FLAGGED)
    assert flagged.actor == "x"
    assert flagged.data == {
        "from": "runnable",
        "to": "needs_human",
        "reason": "two reports",
        "code": "conflict",
    }
    # A transition that is not allowed from where the task is writes nothing.
    assert not task_transition(task_id=task.pk, to=TaskStatus.WAITING, wake_in=0)
    assert Entry.objects.filter(task=task).count() == 2  # created, flagged


def test_no_status_is_written_outside_the_state_machine() -> None:
    """Statuses are written by journal/status.py alone: no other module spells a write."""
    writes = re.compile(
        r"""((?<![\w.])status\s*=\s*["'])|(SET\s+status\b)|(update\(\s*status=)""", re.I
    )
    offenders = []
    for path in [*ROOT.glob("journal/**/*.py"), *ROOT.glob("agentops/**/*.py")]:
        if "migrations" in path.parts or path.name == "status.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if writes.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


# --- What a person may do (journal/operator.py) ---------------------------------------------


def test_resume_lets_a_flagged_task_go_on_and_records_who_and_why() -> None:
    task = task_create(kind="renewal", goal="g")
    lease = lease_acquire(task_id=task.pk, owner="r")
    assert lease is not None
    Task.objects.filter(pk=task.pk).update(failed_runs=5)
    task_flag(lease=lease, task_id=task.pk, code=Attention.RUN_FAILURES, reason="runs died")
    assert task_resume(task_id=task.pk, actor="ops@example.com", reason="worker fixed") == (
        TaskStatus.RUNNABLE
    )
    task.refresh_from_db()
    assert task.status == "runnable" and task.attention_code == "" and task.failed_runs == 0
    action = Entry.objects.get(task=task, kind=EntryKind.OPERATOR_ACTION)
    assert action.actor == "ops@example.com"
    assert action.data == {"action": "resume", "reason": "worker fixed", "was": "run_failures"}


@pytest.mark.parametrize("reason", ["", "   "])
def test_an_operator_action_without_a_reason_is_refused(reason: str) -> None:
    task = task_in(TaskStatus.NEEDS_HUMAN)
    with pytest.raises(TransitionRefused, match="say why"):
        task_resume(task_id=task.pk, actor="ops", reason=reason)


def test_only_a_task_that_needs_a_human_is_resumed_or_cancelled() -> None:
    task = task_create(kind="renewal", goal="g")
    with pytest.raises(TransitionRefused, match="is runnable; only a task that needs a human"):
        task_resume(task_id=task.pk, actor="ops", reason="why not")
    with pytest.raises(TransitionRefused):
        task_cancel(task_id=task.pk, actor="ops", reason="why not")
    assert not Entry.objects.filter(task=task, kind=EntryKind.OPERATOR_ACTION).exists()


def test_a_task_with_a_step_that_may_have_acted_is_not_cancelled() -> None:
    task = task_create(kind="renewal", goal="g")
    lease = lease_acquire(task_id=task.pk, owner="r")
    assert lease is not None
    step = step_record(lease=lease, decision=charge(invoice()), tools={"charge": tool()})
    task_flag(lease=lease, task_id=task.pk, code=Attention.PARKED, reason="stop")
    with pytest.raises(TransitionRefused, match=f"step {step.key} .* is pending: it may have"):
        task_cancel(task_id=task.pk, actor="ops", reason="stop it")
    assert Task.objects.get(pk=task.pk).status == "needs_human"


def test_cancel_records_who_and_why() -> None:
    task = task_in(TaskStatus.NEEDS_HUMAN)
    task_cancel(task_id=task.pk, actor="ops@example.com", reason="customer withdrew")
    task.refresh_from_db()
    assert task.status == "cancelled"
    cancelled = Entry.objects.get(task=task, kind=EntryKind.TASK_CANCELLED)
    assert cancelled.actor == "ops@example.com" and "customer withdrew" in cancelled.data["reason"]


def test_resuming_a_finished_task_flagged_by_a_late_report_finishes_it_again() -> None:
    task = task_create(kind="renewal", goal="g")
    lease = lease_acquire(task_id=task.pk, owner="r")
    assert lease is not None
    task_finish(lease=lease, decision=Finish("over"), summary="Nothing was done.")
    task_flag(task_id=task.pk, code=Attention.CONFLICT, reason="a late report")
    assert task_resume(task_id=task.pk, actor="ops", reason="checked") == TaskStatus.FINISHED
    assert Step.objects.filter(task=task).count() == 1  # nothing was asked or run again


def tool() -> ChargeTool:
    return ChargeTool(Provider())
