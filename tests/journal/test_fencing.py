"""Every journal write under a lease is fenced: a runner whose lease was taken over writes
nothing. One case per write, so removing the lease check from any one of them fails here,
and every function of the journal that takes a lease has its case (read from the functions'
own signatures)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from journal.calls import signatures
from journal.leases import Lease, LeaseLost, lease_acquire, lease_call, lease_release
from journal.models import Attention, Entry, Step, Task
from journal.outcomes import Outcome
from journal.perform import step_perform, step_reconcile
from journal.policy import Policy
from journal.protocols import Finish
from journal.record import step_record, task_create, task_finish
from journal.sagas import effect_checked, saga_unwind
from journal.settle import step_attempt_start, step_mark_unknown, step_settle
from journal.status import task_await, task_flag, task_wait, task_wake
from tests.databases import as_owner
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
    "task_flag": lambda lease, step: task_flag(lease=lease, code=Attention.PARKED, reason="stop"),
    "task_wait": lambda lease, step: task_wait(
        lease=lease, until=datetime.now(UTC) + timedelta(minutes=1), reason="x"
    ),
    "task_wake": lambda lease, step: task_wake(lease=lease, reason="its time"),
    "task_await": lambda lease, step: task_await(lease=lease, approval_id=0),
    "saga_unwind": lambda lease, step: saga_unwind(lease=lease, reason="x"),
    "effect_checked": lambda lease, step: effect_checked(
        lease=lease,
        fact=step,  # type: ignore[arg-type]  # a Step has the n it reads
        stands=True,
    ),
    "approval_request": lambda lease, step: lease_call(
        lease, "journal_approval_request", tool="charge", args={}, reason="x", ttl=60.0
    ),
    "approval_expire": lambda lease, step: lease_call(lease, "journal_approval_expire", approval=0),
    "approval_spend": lambda lease, step: lease_call(
        lease, "journal_approval_spend", approval=0, step=step.pk
    ),
    "lease_renew": lambda lease, step: lease_call(lease, "journal_lease_renew"),
}
# What each lease move of the journal is called by here (the others take no lease).
MOVES = {
    "journal_record": "step_record",
    "journal_attempt_start": "step_attempt_start",
    "journal_settle": "step_settle",
    "journal_mark_unknown": "step_mark_unknown",
    "journal_finish": "task_finish",
    "journal_task_flag": "task_flag",
    "journal_task_wait": "task_wait",
    "journal_task_wake": "task_wake",
    "journal_task_await": "task_await",
    "journal_saga_unwind": "saga_unwind",
    "journal_effect_checked": "effect_checked",
    "journal_approval_request": "approval_request",
    "journal_approval_expire": "approval_expire",
    "journal_approval_spend": "approval_spend",
    "journal_lease_renew": "lease_renew",
    "journal_lease_release": "lease_release",
}


def test_every_move_under_a_lease_has_its_case_here() -> None:
    taking_a_lease = {
        name
        for name, fn in signatures().items()
        if any(a.name == "token" for a in fn.arguments) and name != "journal_hold"
    }
    assert taking_a_lease == set(MOVES)
    # Performing and reconciling are made of those moves, and checked as wholes too.
    assert set(MOVES.values()) - {"lease_release"} == set(WRITES) - {
        "step_perform",
        "step_reconcile",
    }


def test_a_stale_release_gives_back_nothing() -> None:
    task = task_create(kind="renewal", goal="fenced")
    stale = lease_acquire(task_id=task.pk, owner="stale", seconds=30)
    assert stale is not None
    as_owner("UPDATE journal_task SET lease_expires_at = now() WHERE id = %s", [task.pk])
    fresh = lease_acquire(task_id=task.pk, owner="new", seconds=30)
    assert fresh is not None
    lease_release(stale)
    task.refresh_from_db()
    assert (task.lease_owner, task.lease_token) == ("new", fresh.token)
    assert task.lease_expires_at is not None


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
    as_owner(
        "UPDATE journal_task SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
        [task.pk],
    )
    assert lease_acquire(task_id=task.pk, owner="new", seconds=30) is not None
    before = _snapshot(task.pk)
    with pytest.raises(LeaseLost):
        WRITES[name](stale, step)
    assert _snapshot(task.pk) == before
