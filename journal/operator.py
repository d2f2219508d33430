"""What a person may do to a task the harness handed over (docs/design.md §7, §8).

Each action is recorded with who did it and why, in the same transaction as its effect on
the task, and refused — with a sentence, nothing written — where it is not safe.
"""

from __future__ import annotations

from uuid import UUID

from django.db import transaction
from django.db.models.functions import Now

from journal.entries import entry
from journal.models import EntryKind, Step, StepKind, Task, TaskStatus
from journal.outcomes import LIVE_STATES, StepState
from journal.status import TransitionRefused, task_transition


def _flagged(task_id: UUID, action: str) -> Task:
    task = Task.objects.select_for_update().get(pk=task_id)
    if task.status != TaskStatus.NEEDS_HUMAN:
        raise TransitionRefused(
            f"task {task_id} is {TaskStatus(task.status).label}; only a task that needs a "
            f"human can be {action}"
        )
    return task


def _why(reason: str) -> str:
    reason = reason.strip()
    if not reason:
        raise TransitionRefused("say why: the journal records every operator action's reason")
    return reason[:2000]


def task_resume(*, task_id: UUID, actor: str, reason: str) -> TaskStatus:
    """Let a task that needs a human go on, and say what it is now.

    A task that had already finished (flagged later by a conflicting report) goes back to
    finished: its decision that it was over stands. Any other goes back to runnable, its
    run-failure count cleared, and an unknown step nobody was looking up any more gets one
    more lookup at once (which may hand it back, if that still settles nothing).
    """
    why = _why(reason)
    with transaction.atomic():
        task = _flagged(task_id, "resumed")
        finished = Step.objects.filter(task=task, kind=StepKind.FINISH).exists()
        to = TaskStatus.FINISHED if finished else TaskStatus.RUNNABLE
        Task.objects.filter(pk=task_id).update(failed_runs=0)
        Step.objects.filter(task=task, state=StepState.UNKNOWN, next_check_at__isnull=True).update(
            next_check_at=Now()
        )
        entry(
            kind=EntryKind.OPERATOR_ACTION,
            task_id=task_id,
            actor=actor,
            action="resume",
            reason=why,
            was=task.attention_code,
        ).save()
        task_transition(
            task_id=task_id,
            to=to,
            frm=[TaskStatus.NEEDS_HUMAN],
            actor=actor,
            reason=f"resumed by {actor}: {why}",
        )
    return to


def task_cancel(*, task_id: UUID, actor: str, reason: str) -> None:
    """Stop a task that needs a human. Refused while one of its steps may still have acted:
    that step must be settled (reconciled, or resolved by hand) first, or nobody would ever
    find out what happened."""
    why = _why(reason)
    with transaction.atomic():
        task = _flagged(task_id, "cancelled")
        open_step = Step.objects.filter(task=task, state__in=LIVE_STATES).order_by("n").first()
        if open_step is not None:
            raise TransitionRefused(
                f"step {open_step.key} ({open_step.tool}) is {open_step.state}: it may have "
                "happened; reconcile it or resolve it by hand before cancelling the task"
            )
        entry(
            kind=EntryKind.OPERATOR_ACTION,
            task_id=task_id,
            actor=actor,
            action="cancel",
            reason=why,
            was=task.attention_code,
        ).save()
        task_transition(
            task_id=task_id,
            to=TaskStatus.CANCELLED,
            frm=[TaskStatus.NEEDS_HUMAN],
            actor=actor,
            reason=f"cancelled by {actor}: {why}",
        )
