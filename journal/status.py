"""A task's status, and its state machine (docs/design.md §7): declared here, once.

:data:`TRANSITIONS` says who may follow whom and :data:`FINAL` which statuses end a task.
PostgreSQL holds them as the tables ``journal_status`` and ``journal_status_move``, written
from here by :func:`status_machine_sync` when migrations run (tests/journal/test_status.py
compares them), and every status change is ``journal_transition`` (journal/sql), which makes
no move the table does not hold. Python never changes a status itself: each move that does
is a function of its own (``journal_task_wait``, ``journal_finish``, ``journal_task_resume``
...), called through ``journal.calls``.

Attention has a code beside its sentence, so pages and tools can act on it without parsing
prose.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from django.db.models import Q
from django.db.models.functions import Now

from journal.calls import Refused, call_all
from journal.leases import Lease, lease_call
from journal.models import Attention, TaskStatus

# Who may follow whom. Written into journal_status_move by status_machine_sync.
TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    TaskStatus.RUNNABLE: frozenset(
        {
            TaskStatus.WAITING,
            TaskStatus.NEEDS_HUMAN,
            TaskStatus.FINISHED,
            TaskStatus.AWAITING_APPROVAL,
            TaskStatus.COMPENSATED,
        }
    ),
    TaskStatus.WAITING: frozenset({TaskStatus.RUNNABLE, TaskStatus.NEEDS_HUMAN}),
    TaskStatus.AWAITING_APPROVAL: frozenset({TaskStatus.RUNNABLE, TaskStatus.NEEDS_HUMAN}),
    TaskStatus.NEEDS_HUMAN: frozenset(
        {
            TaskStatus.RUNNABLE,
            TaskStatus.FINISHED,
            TaskStatus.CANCELLED,
            TaskStatus.COMPENSATED,
            TaskStatus.NEEDS_HUMAN,
        }
    ),
    # An ended task goes to a person when a later report contradicts it, and back to how it
    # ended, never further (journal_transition: finished means finished).
    TaskStatus.FINISHED: frozenset({TaskStatus.NEEDS_HUMAN}),
    TaskStatus.CANCELLED: frozenset({TaskStatus.NEEDS_HUMAN}),
    TaskStatus.COMPENSATED: frozenset({TaskStatus.NEEDS_HUMAN}),
}

FINAL = (TaskStatus.FINISHED, TaskStatus.CANCELLED, TaskStatus.COMPENSATED)
ADVANCING = (TaskStatus.RUNNABLE, TaskStatus.WAITING)

TransitionRefused = Refused
"""A person's move on a task refused by its precondition (the sentence to show); nothing was
written. The name the operator services have always raised."""


def status_machine_sync(connection: Any) -> None:
    """Write :data:`TRANSITIONS` and :data:`FINAL` into ``journal_status`` and
    ``journal_status_move`` (as the tables' owner: migrations call it), replacing what they
    held, in one transaction."""
    statuses = [(s.value, str(s.label), s in FINAL) for s in TaskStatus]
    moves = [(a.value, b.value) for a, targets in TRANSITIONS.items() for b in sorted(targets)]
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM journal_status_move")
        cursor.execute("DELETE FROM journal_status")
        cursor.executemany(
            "INSERT INTO journal_status (status, label, final) VALUES (%s, %s, %s)", statuses
        )
        cursor.executemany(
            "INSERT INTO journal_status_move (from_status, to_status) VALUES (%s, %s)", moves
        )


# --- A runner's status moves, under its lease ----------------------------------------------


def task_wait(*, lease: Lease, until: datetime, reason: str) -> bool:
    """Park the runnable task until ``until`` and give the lease back (the run ends here).
    Returns whether it moved."""
    moved = bool(lease_call(lease, "journal_task_wait", wake_at=until, reason=reason).moved)
    lease.released = lease.released or moved
    return moved


def task_wake(*, lease: Lease, reason: str) -> bool:
    """Wake the waiting task whose time came. Returns whether it moved."""
    return bool(lease_call(lease, "journal_task_wake", reason=reason).moved)


def waiters_wake(*, key: str, actor: str) -> list[UUID]:
    """Wake at once the waiting tasks whose last step the guard refused because the step
    ``key`` was in flight or unknown, now that it settled (``journal_waiters_wake``): they
    decide again now rather than at their backed-off time. None while it is still open.
    Returns the tasks woken, to ring for once committed."""
    woken: list[UUID] = call_all("journal_waiters_wake", key=key, actor=actor)
    return woken


def task_flag(
    *,
    lease: Lease,
    code: Attention,
    reason: str,
    step_id: int | None = None,
    release: bool = False,
    frm: tuple[TaskStatus, ...] | None = None,
) -> bool:
    """Hand the task to a person, with a code and a sentence; from any status (or one of
    ``frm``). With ``release``, the lease is given back in the same statement. Returns
    whether it moved."""
    given: dict[str, Any] = {"code": str(code), "reason": reason, "step": step_id}
    if frm is not None:
        given["from"] = [str(s) for s in frm]
    moved = bool(lease_call(lease, "journal_task_flag", release=release, **given).moved)
    lease.released = lease.released or (moved and release)
    return moved


def task_await(*, lease: Lease, approval_id: int) -> bool:
    """Put the runnable task back to wait for a person's decision on its pending approval,
    giving the lease back. Returns whether it moved."""
    moved = bool(lease_call(lease, "journal_task_await", approval=approval_id).moved)
    lease.released = lease.released or moved
    return moved


def runnable_q() -> Q:
    """Tasks that can advance now: runnable ones, and waiting ones whose time has come.

    The sweeper's query, the runner's pick-up and the wake-up all judge by this one rule.
    """
    return Q(status=TaskStatus.RUNNABLE) | Q(status=TaskStatus.WAITING, wake_at__lte=Now())


def lease_free_q() -> Q:
    return Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=Now())
