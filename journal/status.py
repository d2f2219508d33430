"""A task's status, and the one place it changes (docs/design.md §7).

Every status change goes through ``journal_transition`` (journal/sql), which Python calls as
:func:`task_transition` and the SQL that finishes a task calls directly: one UPDATE guarded
by the statuses it may come from, and one entry saying from what, to what, by whom and why,
in one transaction. PostgreSQL refuses any status change that is not a transition of
:data:`TRANSITIONS` (the trigger ``journal_task_state_machine``), so a write that bypasses
this module fails loudly.

Attention has a code beside its sentence, so pages and tools can act on it without parsing
prose.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.db.models import Q
from django.db.models.functions import Now

from journal.entries import entries_add
from journal.leases import Lease, LeaseLost, deferred_write, lease_seconds
from journal.models import Attention, Entry, Task, TaskStatus

# Who may follow whom. Mirrored by journal/sql/journal_task_transition; a test checks they
# agree (tests/journal/test_status.py).
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
    TaskStatus.FINISHED: frozenset({TaskStatus.NEEDS_HUMAN}),
    TaskStatus.CANCELLED: frozenset({TaskStatus.NEEDS_HUMAN}),
    TaskStatus.COMPENSATED: frozenset({TaskStatus.NEEDS_HUMAN}),
}

FINAL = (TaskStatus.FINISHED, TaskStatus.CANCELLED, TaskStatus.COMPENSATED)
ADVANCING = (TaskStatus.RUNNABLE, TaskStatus.WAITING)


def sources(to: TaskStatus) -> list[TaskStatus]:
    """The statuses a task may move to ``to`` from."""
    return [s for s, targets in TRANSITIONS.items() if to in targets]


class TransitionRefused(Exception):
    """The task is not in a status this change may be made from; nothing was written."""


# journal_transition (journal/sql): the one place a task's status changes.
TRANSITION = (
    "SELECT * FROM journal_transition(p_task => %(task)s::uuid, p_to => %(to)s::text, "
    "p_from => %(frm)s::text[], p_token => %(token)s::bigint, p_lease => %(lease)s::float8, "
    "p_release => %(release)s::boolean, p_wake_at => %(wake_at)s::timestamptz, "
    "p_wake_in => %(wake_in)s::float8, p_code => %(code)s::text, p_reason => %(reason)s::text, "
    "p_actor => %(actor)s::text, p_step => %(step)s::bigint, p_data => %(data)s::jsonb)"
)


def task_transition(
    *,
    task_id: UUID,
    to: TaskStatus,
    frm: Iterable[TaskStatus] | None = None,
    lease: Lease | None = None,
    actor: str = "",
    reason: str = "",
    code: Attention | str = "",
    step_id: int | None = None,
    wake_at: datetime | None = None,
    wake_in: float | None = None,
    extra: Sequence[Entry] = (),
    release: Lease | None = None,
    **data: Any,
) -> bool:
    """Move the task to ``to`` if its status is one of ``frm`` (default: every status ``to``
    may follow). Returns whether it moved; when it did not, nothing is written.

    One statement (``journal_transition``), in the caller's transaction when there is one (a
    service that settles a step and wakes its task does both in one commit). With ``lease``,
    the write is fenced first (:class:`LeaseLost` if it was taken over); with ``release``,
    that lease is given back cleanly in the same update (the run ends here). ``wake_at`` (or
    ``wake_in`` seconds from the database's now) is required for ``waiting``; ``code`` and
    ``reason`` for ``needs_human``. ``extra`` entries are written after it, if it moved.
    """
    allowed = sources(to)
    froms = [str(s) for s in (frm if frm is not None else allowed) if s in allowed]
    if to == TaskStatus.WAITING and wake_at is None and wake_in is None:
        raise ValueError("a waiting task needs a wake_at")
    if to == TaskStatus.NEEDS_HUMAN and not (code and reason):
        raise ValueError("a task handed to a human needs an attention code and a reason")
    if release is not None and lease is not None and release is not lease:
        raise ValueError("a run gives back the lease it fences with")
    holder = lease or release
    if holder is not None:
        deferred_write(holder)  # a settlement the runner held back comes first
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                TRANSITION,
                {
                    "task": task_id,
                    "to": str(to),
                    "frm": froms,
                    "token": holder.token if holder is not None else None,
                    "lease": lease_seconds(),
                    "release": release is not None,
                    "wake_at": wake_at,
                    "wake_in": wake_in,
                    "code": str(code),
                    "reason": reason,
                    "actor": actor,
                    "step": step_id,
                    "data": json.dumps(data, cls=DjangoJSONEncoder),
                },
            )
            row = cursor.fetchone()
        if row is None:  # only a fenced transition returns no row
            raise LeaseLost.of(holder) if holder is not None else Task.DoesNotExist(task_id)
        moved, version = row
        if moved is None:
            return False
        if lease is not None:
            lease.versions += [int(version) - 1, int(version)]  # the fence's, then its own
        if release is not None:
            release.released = True
        entries_add(*extra)
    return True


def task_flag(
    *,
    task_id: UUID,
    code: Attention,
    reason: str,
    lease: Lease | None = None,
    step_id: int | None = None,
    actor: str = "",
    release: bool = False,
) -> bool:
    """Hand the task to a human, with a code and a sentence; from any status. With
    ``release``, the holder of ``lease`` gives it back in the same update."""
    return task_transition(
        task_id=task_id,
        to=TaskStatus.NEEDS_HUMAN,
        lease=lease,
        code=code,
        reason=reason,
        step_id=step_id,
        actor=actor,
        release=lease if release else None,
    )


def runnable_q() -> Q:
    """Tasks that can advance now: runnable ones, and waiting ones whose time has come.

    The sweeper's query, the runner's pick-up and the wake-up all judge by this one rule.
    """
    return Q(status=TaskStatus.RUNNABLE) | Q(status=TaskStatus.WAITING, wake_at__lte=Now())


def lease_free_q() -> Q:
    return Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=Now())
