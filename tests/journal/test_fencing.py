"""Every journal write under a lease is fenced: a runner whose lease was taken over writes
nothing. One case per write, so removing the fence from any one of them fails here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from journal.leases import Lease, LeaseLost, lease_acquire
from journal.models import Attention, Entry, Step, Task, TaskStatus
from journal.outcomes import Outcome
from journal.perform import step_perform, step_reconcile
from journal.policy import Policy
from journal.protocols import Finish
from journal.record import step_record, task_create, task_finish
from journal.settle import step_attempt_start, step_mark_unknown, step_settle
from journal.status import task_flag, task_transition
from tests.journal.support import ChargeTool, Provider, charge, invoice

pytestmark = pytest.mark.usefixtures("committed")

TOOL = ChargeTool(Provider())
TOOLS = {"charge": TOOL}

Write = Callable[[Lease, Step], Any]

WRITES: dict[str, Write] = {
    "step_record": lambda lease, step: step_record(
        lease=lease, decision=charge(invoice()), tools=TOOLS
    ),
    "step_perform": lambda lease, step: step_perform(lease=lease, step=step, tool=TOOL),
    "step_reconcile": lambda lease, step: step_reconcile(
        lease=lease, step=step, tool=TOOL, policy=Policy()
    ),
    "step_attempt_start": lambda lease, step: step_attempt_start(lease=lease, step=step),
    "step_settle": lambda lease, step: step_settle(
        step_id=step.pk, outcome=Outcome.done({"id": "x"}), via="attempt", lease=lease
    ),
    "step_mark_unknown": lambda lease, step: step_mark_unknown(
        lease=lease, step=step, outcome=Outcome.unknown("timeout"), next_check_in=1.0
    ),
    "task_finish": lambda lease, step: task_finish(
        lease=lease, decision=Finish("over"), summary="over"
    ),
    "task_flag": lambda lease, step: task_flag(
        lease=lease, task_id=lease.task_id, code=Attention.PARKED, reason="stop"
    ),
    "task_transition": lambda lease, step: task_transition(
        lease=lease, task_id=lease.task_id, to=TaskStatus.WAITING, wake_in=0
    ),
}


def _snapshot(task_id: Any) -> tuple[Any, ...]:
    task = Task.objects.get(pk=task_id)
    steps = list(Step.objects.filter(task_id=task_id).values_list("id", "state", "attempts"))
    entries = Entry.objects.filter(task_id=task_id).count()
    return task.status, task.step_count, task.lease_token, steps, entries


@pytest.mark.parametrize("name", list(WRITES))
def test_a_write_under_a_lease_that_was_taken_over_writes_nothing(name: str) -> None:
    task = task_create(kind="renewal", goal="fenced")
    stale = lease_acquire(task_id=task.pk, owner="stale", seconds=30)
    assert stale is not None
    step = step_record(lease=stale, decision=charge(invoice()), tools=TOOLS)
    # The stale runner stalls past its lease; another takes the task over.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE journal_task SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
            [task.pk],
        )
    assert lease_acquire(task_id=task.pk, owner="new", seconds=30) is not None
    before = _snapshot(task.pk)
    with pytest.raises(LeaseLost):
        WRITES[name](stale, step)
    assert _snapshot(task.pk) == before
