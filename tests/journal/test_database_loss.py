"""A run that loses its database gives its lease back as soon as the database answers again
(issue 12): before, the task waited out its whole lease (60 s in production) for a runner.

The database "goes away" for real: the server terminates the runner's own session in the
middle of the run, as a restart would.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.db import connection, connections, transaction

from journal.models import Step, Task
from journal.protocols import Decision, TaskFacts
from journal.record import task_create
from journal.run import DatabaseLost, task_advance
from tests.journal.support import ChargeTool, Provider, ScriptedPlanner, charge, invoice

pytestmark = pytest.mark.usefixtures("committed")


def _terminate_own_session() -> None:
    """End the runner's database session from another one, as a server restart would."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
            assert cursor.fetchone()[0] is True
    finally:
        other.close()


class CutAfterDeciding(ScriptedPlanner):
    """Decides, but the database goes away while it does (the first time only)."""

    def __init__(self, decisions: list[Any]) -> None:
        super().__init__(decisions)
        self.cuts = 1

    def decide(self, facts: TaskFacts) -> Decision:
        if self.cuts:
            self.cuts -= 1
            _terminate_own_session()
        return super().decide(facts)


def test_a_run_that_loses_its_database_gives_its_lease_back_and_records_nothing() -> None:
    task = task_create(kind="renewal", goal="charge")
    tool = ChargeTool(Provider())
    planner = CutAfterDeciding([charge(invoice())])
    with pytest.raises(DatabaseLost) as lost:
        task_advance(task_id=task.pk, planner=planner, tools={"charge": tool}, owner="doomed")
    assert lost.value.released is True
    task.refresh_from_db()
    # Free at once (not in JOURNAL_LEASE_SECONDS), and counted as a run that did not end well.
    assert task.lease_expires_at is None and task.lease_owner == ""
    assert task.failed_runs == 1
    assert not Step.objects.filter(task=task).exists() and tool.calls == []

    result = task_advance(task_id=task.pk, planner=planner, tools={"charge": tool}, owner="next")
    assert result.stopped == "finished"
    task = Task.objects.get(pk=task.pk)
    assert task.failed_runs == 0 and task.lease_expires_at is None
    assert [e.key for e in tool.provider.ledger] == [Step.objects.get(task=task, n=1).key]


def test_a_run_stopped_inside_a_write_for_longer_than_its_lease_ends_as_a_lost_database(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server ends a session idle inside a transaction for a lease's length (it holds
    the task's row lock: agentops/settings.py). The runner, when it goes on, finds its
    session gone: that is a lost database, not a bug to hand to a person.

    Every move of the journal is one statement, committed by itself, with nothing in between
    to stop in; a caller may still make one inside a transaction of its own. Here the move
    that marks a timed-out call unknown is, and the runner stops after it, before the commit,
    the task's row locked. The charge landed; the next run finds the step it never heard back
    from and looks it up instead of charging again.
    """
    import journal.leases
    import journal.settle

    real_call = journal.leases.lease_call
    stalls = [2.5]  # past the tests' 2 s lease, once

    def stalling_call(lease: Any, function: str, **options: Any) -> Any:
        if function != "journal_mark_unknown" or not stalls:
            return real_call(lease, function, **options)
        with transaction.atomic():
            row = real_call(lease, function, **options)
            time.sleep(stalls.pop())  # stopped here, the task's row locked
        return row

    monkeypatch.setattr(journal.settle, "lease_call", stalling_call)
    task = task_create(kind="renewal", goal="charge")
    tool = ChargeTool(Provider(), script=["timeout_after"])
    planner = ScriptedPlanner([charge(invoice())])
    with pytest.raises(DatabaseLost) as lost:
        task_advance(task_id=task.pk, planner=planner, tools={"charge": tool})
    assert lost.value.released is True
    task.refresh_from_db()
    # The record was committed before the call; marking it unknown never was.
    assert task.status == "runnable" and task.attention_code == ""
    [step] = Step.objects.filter(task=task)
    assert step.state == "pending" and len(tool.provider.ledger) == 1

    result = task_advance(task_id=task.pk, planner=planner, tools={"charge": tool})
    assert result.stopped == "finished"
    step.refresh_from_db()
    assert step.state == "done"
    assert [e.key for e in tool.provider.ledger] == [step.key]  # charged once, all told
