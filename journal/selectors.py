"""Reads of the journal."""

from __future__ import annotations

from uuid import UUID

from django.db.models import Exists, OuterRef, Q, QuerySet
from django.db.models.functions import Now

from journal.models import Step, StepKind, Task, TaskStatus
from journal.outcomes import StepState
from journal.protocols import StepFact, TaskFacts


def task_facts(*, task: Task) -> TaskFacts:
    """What the planner is told: the journal's facts, never the model's own memory."""
    steps = Step.objects.filter(task=task, kind=StepKind.CALL).order_by("n")
    return TaskFacts(
        task_id=str(task.pk),
        kind=task.kind,
        goal=task.goal,
        refs=task.refs,
        steps=[
            StepFact(
                n=s.n,
                tool=s.tool,
                args=s.args,
                state=StepState(s.state),
                detail=s.detail,
                key=s.key,
                guard=s.guard,
                evidence=s.evidence,
                refused="refused_by" in s.outcome,
            )
            for s in steps
        ],
    )


def task_list_runnable() -> QuerySet[Task]:
    """Tasks the journal says can advance now and that no live runner holds.

    Running tasks, and waiting tasks whose unknown step is due for its lookup. This is what
    a sweeper re-enqueues after a killed worker, a lost job or an emptied Redis.
    """
    due = Step.objects.filter(
        task=OuterRef("pk"), state=StepState.UNKNOWN, next_check_at__lte=Now()
    )
    return Task.objects.filter(
        Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=Now()),
    ).filter(Q(status=TaskStatus.RUNNING) | (Q(status=TaskStatus.WAITING) & Exists(due)))


def task_open_step(*, task_id: UUID) -> Step | None:
    """The task's step that is in flight or unknown, if any (the guard allows one at most
    per object; the runner never starts another step while one is open)."""
    return (
        Step.objects.filter(task_id=task_id, state__in=(StepState.PENDING, StepState.UNKNOWN))
        .annotate(due=Q(next_check_at__lte=Now()))
        .order_by("n")
        .first()
    )


def step_by_key(*, key: str) -> Step | None:
    return Step.objects.filter(key=key).first()
