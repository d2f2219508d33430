"""A task's status, and the one place it changes (docs/design.md §7).

Every status change goes through :func:`task_transition`: one UPDATE guarded by the statuses
it may come from, and one entry saying from what, to what, by whom and why, in one
transaction. PostgreSQL refuses any other change of status (a trigger, migration
``0004_task_state_machine``), so a write that bypasses this module fails loudly.

Attention has a code beside its sentence, so pages and tools can act on it without parsing
prose.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import F, Q
from django.db.models.expressions import Combinable
from django.db.models.functions import Now

from journal.entries import entry
from journal.leases import Lease, fence
from journal.models import Attention, EntryKind, Task, TaskStatus

# Who may follow whom. Mirrored by the trigger of migration 0004; change both together.
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
    wake_at: datetime | Combinable | None = None,
    extra: Sequence[Any] = (),
    release: Lease | None = None,
    columns: dict[str, Any] | None = None,
    **data: Any,
) -> bool:
    """Move the task to ``to`` if its status is one of ``frm`` (default: every status ``to``
    may follow). Returns whether it moved; when it did not, nothing is written.

    Runs in the caller's transaction when there is one (a service that settles a step and
    wakes its task does both in one commit). With ``lease``, the write is fenced first; with
    ``release``, that lease is given back cleanly in the same update (the run ends here).
    ``wake_at`` is required for ``waiting``; ``code`` and ``reason`` for ``needs_human``.
    ``columns`` are other columns of the task the same update sets (never its status).
    """
    columns = dict(columns or {})
    if "status" in columns:
        raise ValueError("a task's status changes only by its transition")
    allowed = sources(to)
    froms = [s for s in (frm if frm is not None else allowed) if s in allowed]
    if to == TaskStatus.WAITING and wake_at is None:
        raise ValueError("a waiting task needs a wake_at")
    if to == TaskStatus.NEEDS_HUMAN and not (code and reason):
        raise ValueError("a task handed to a human needs an attention code and a reason")
    changes: dict[str, Any] = {"status": to, "wake_at": wake_at, "version": F("version") + 1}
    if release is not None:
        changes.update(lease_expires_at=None, lease_owner="", lease_taken_at=None, failed_runs=0)
    if to == TaskStatus.NEEDS_HUMAN:
        changes.update(attention=reason, attention_code=str(code))
    else:
        changes.update(attention="", attention_code="")
    with transaction.atomic():
        if lease is not None:
            fence(lease)
        if len(froms) == 1:
            # One status it may come from: the UPDATE checks it (under the row's lock, seeing
            # any change committed before it), and that is what it came from.
            was = str(froms[0])
        else:
            rows = list(
                Task.objects.filter(pk=task_id, status__in=froms)
                .values_list("status", flat=True)
                .select_for_update()
            )
            if not rows:
                return False
            was = rows[0]
        moved = Task.objects.filter(pk=task_id, status=was)
        if release is not None:
            moved = moved.filter(lease_token=release.token)
        if not moved.update(**changes, **columns):
            return False
        if release is not None:
            release.released = True
        kind = {
            TaskStatus.RUNNABLE: EntryKind.TASK_RESUMED,
            TaskStatus.WAITING: EntryKind.TASK_WAITING,
            TaskStatus.AWAITING_APPROVAL: EntryKind.APPROVAL_REQUESTED,
            TaskStatus.NEEDS_HUMAN: EntryKind.TASK_FLAGGED,
            TaskStatus.FINISHED: EntryKind.TASK_FINISHED,
            TaskStatus.CANCELLED: EntryKind.TASK_CANCELLED,
            TaskStatus.COMPENSATED: EntryKind.TASK_FINISHED,
        }[to]
        facts = {"from": was, "to": str(to), **data}
        if reason:
            facts["reason"] = reason
        if code:
            facts["code"] = str(code)
        entry(kind=kind, task_id=task_id, step_id=step_id, actor=actor, **facts).save()
        for extra_entry in extra:
            extra_entry.save()
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
