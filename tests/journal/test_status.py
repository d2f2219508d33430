"""One state machine for a task's status (journal/status.py), held by PostgreSQL: declared once
in Python, written into journal_status_move, and made by journal_transition alone."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from journal.leases import lease_acquire
from journal.models import Attention, Entry, EntryKind, Status, StatusMove, Step, Task, TaskStatus
from journal.operator import saga_compensate, steps_reconcile_now, task_cancel, task_resume
from journal.protocols import Finish
from journal.record import step_record, task_create, task_finish
from journal.status import FINAL, TRANSITIONS, TransitionRefused, task_flag
from tests.databases import as_owner, flag, transition
from tests.journal.support import ChargeTool, Provider, charge, invoice

pytestmark = pytest.mark.usefixtures("committed")


def task_in(status: TaskStatus) -> Task:
    """A task brought to ``status`` along the state machine (as the owner: a test's setup)."""
    task = task_create(kind="renewal", goal=f"to be {status}")
    path = {
        TaskStatus.RUNNABLE: [],
        TaskStatus.WAITING: ["waiting"],
        TaskStatus.AWAITING_APPROVAL: ["awaiting_approval"],
        TaskStatus.NEEDS_HUMAN: ["needs_human"],
        TaskStatus.FINISHED: ["finished"],
        TaskStatus.CANCELLED: ["needs_human", "cancelled"],
        TaskStatus.COMPENSATED: ["compensated"],
    }[status]
    for to in path:
        assert transition(task.pk, to)
    task.refresh_from_db()
    assert task.status == status
    return task


def test_postgresql_holds_the_state_machine_declared_here() -> None:
    held = set(StatusMove.objects.values_list("from_status", "to_status"))
    declared = {(a.value, b.value) for a, targets in TRANSITIONS.items() for b in targets}
    assert held == declared
    statuses = {s.status: (s.label, s.final) for s in Status.objects.all()}
    assert statuses == {s.value: (str(s.label), s in FINAL) for s in TaskStatus}


@pytest.mark.parametrize("frm", list(TaskStatus))
@pytest.mark.parametrize("to", list(TaskStatus))
def test_a_status_moves_exactly_along_the_state_machine(frm: TaskStatus, to: TaskStatus) -> None:
    """journal_transition, the one place a status changes, makes exactly the moves of
    TRANSITIONS (an ended task never runs again: only to a person and back to how it ended),
    and the app's role cannot change a status by any other way."""
    task = task_in(frm)
    allowed = to in TRANSITIONS[frm]
    try:
        moved = transition(task.pk, to)
    except psycopg.errors.CheckViolation as exc:
        assert "is not a transition of its state machine" in str(exc)
        moved = False
    assert moved == allowed
    with (
        psycopg.connect(**connection.get_connection_params(), autocommit=True) as app,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        app.execute("UPDATE journal_task SET status = %s WHERE id = %s", [str(to), task.pk])


def test_a_task_that_ended_never_runs_again() -> None:
    """Finished means finished: handed to a person by a late report, an ended task goes back
    to how it ended, whoever asks, and no move makes it runnable, waiting or held again."""
    for ended in FINAL:
        task = task_in(ended)
        assert flag(task.pk)
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="never runs again"):
            transition(task.pk, "runnable")
        others = [s for s in FINAL if s != ended]
        for other in others:
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="never runs again"):
                transition(task.pk, other)
        with pytest.raises(TransitionRefused, match="over"):
            saga_compensate(task_id=task.pk, actor="ops", reason="run it again")
        assert task_resume(task_id=task.pk, actor="ops", reason="checked") == ended
        task.refresh_from_db()
        assert (task.status, task.ended_as) == (ended, ended)


def test_a_waiting_task_always_has_a_wake_up_time_and_a_flagged_one_a_code() -> None:
    task = task_create(kind="renewal", goal="g")
    statement = (
        "SELECT moved_from FROM journal_transition(p_task => %s, p_to => %s, "
        "p_from => ARRAY['runnable'], p_code => %s, p_reason => %s)"
    )
    with pytest.raises(psycopg.errors.CheckViolation, match="time to wake"):
        as_owner(statement, [task.pk, "waiting", "", ""])
    with pytest.raises(psycopg.errors.CheckViolation, match="a code and a sentence"):
        as_owner(statement, [task.pk, "needs_human", "", "why"])
    assert Task.objects.get(pk=task.pk).status == "runnable"


def test_every_transition_is_one_entry_with_from_to_who_and_why() -> None:
    task = task_create(kind="renewal", goal="g")
    assert flag(task.pk, "conflict", "two reports")
    [flagged] = Entry.objects.filter(task=task, kind=EntryKind.TASK_FLAGGED)
    assert flagged.data == {
        "from": "runnable",
        "to": "needs_human",
        "reason": "two reports",
        "code": "conflict",
    }
    task_resume(task_id=task.pk, actor="x", reason="looked")
    [resumed] = Entry.objects.filter(task=task, kind=EntryKind.TASK_RESUMED)
    assert resumed.actor == "x"
    assert resumed.data == {
        "from": "needs_human",
        "to": "runnable",
        "reason": "resumed by x: looked",
    }
    # A move that is not allowed from where the task is writes nothing.
    with pytest.raises(psycopg.errors.CheckViolation):
        transition(task.pk, "cancelled")
    assert Entry.objects.filter(task=task).count() == 4  # created, flagged, resume, resumed


# --- What a person may do (journal/operator.py) ---------------------------------------------


def test_resume_lets_a_flagged_task_go_on_and_records_who_and_why() -> None:
    task = task_create(kind="renewal", goal="g")
    lease = lease_acquire(task_id=task.pk, owner="r")
    assert lease is not None
    as_owner("UPDATE journal_task SET failed_runs = 5 WHERE id = %s", [task.pk])
    task_flag(lease=lease, code=Attention.RUN_FAILURES, reason="runs died")
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
    task_flag(lease=lease, code=Attention.PARKED, reason="stop")
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
    flag(task.pk, "conflict", "a late report")
    assert task_resume(task_id=task.pk, actor="ops", reason="checked") == TaskStatus.FINISHED
    assert Step.objects.filter(task=task).count() == 1  # nothing was asked or run again
    assert steps_reconcile_now(step_ids=[], actor="ops") == []


def tool() -> ChargeTool:
    return ChargeTool(Provider())
