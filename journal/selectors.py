"""Reads of the journal."""

from __future__ import annotations

from collections.abc import Iterable
from uuid import UUID

from django.db.models import F, Q, QuerySet
from django.db.models.functions import Now

from journal.models import Step, StepKind, Task
from journal.outcomes import StepState
from journal.protocols import StepFact, TaskFacts
from journal.status import lease_free_q, runnable_q


def task_facts(*, task: Task) -> TaskFacts:
    """What the planner is told: the journal's facts, never the model's own memory. A task
    with no step yet costs no query."""
    if not task.step_count:
        return task_facts_of(task=task, steps=[])
    steps = (
        Step.objects.filter(task=task, kind=StepKind.CALL)
        .annotate(offsets_n=F("offsets__n"))
        .order_by("n")
    )
    return task_facts_of(task=task, steps=steps)


def task_facts_of(*, task: Task, steps: Iterable[Step]) -> TaskFacts:
    """The facts of ``task`` from steps already read (annotated with ``offsets_n``)."""
    steps = [s for s in steps if s.kind == StepKind.CALL]
    return TaskFacts(
        task_id=str(task.pk),
        kind=task.kind,
        goal=task.goal,
        refs=task.refs,
        plan=task.plan,
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
                refusal=s.refusal,
                offset=s.offset_by_id is not None,
                offsets=s.offsets_n,  # type: ignore[attr-defined]
                retries=s.retries,
                undo_tool=s.undo_tool,
                transient=s.state == StepState.NOT_DONE and bool(s.outcome.get("transient")),
                settled_at=s.settled_at,
                refused_by=str(s.outcome.get("refused_by") or "") if s.refusal else "",
                first_evidence=dict(s.outcome.get("first_evidence") or {}) if s.refusal else {},
                misconfigured=s.state == StepState.NOT_DONE
                and bool(s.outcome.get("misconfigured")),
            )
            for s in steps
        ],
    )


def task_facts_by_id(*, task_id: UUID) -> TaskFacts:
    return task_facts(task=Task.objects.get(pk=task_id))


def task_list_runnable() -> QuerySet[Task]:
    """Tasks that can advance now and that no live runner holds.

    Runnable tasks, and waiting tasks whose time has come (journal.status.runnable_q, the
    same rule the runner judges by). This is what a sweeper re-enqueues after a killed
    worker, a lost job or an emptied Redis.
    """
    return Task.objects.filter(runnable_q(), lease_free_q())


def task_open_step(*, task_id: UUID) -> Step | None:
    """The task's step that is in flight or unknown, if any (the guard allows one at most
    per object; the runner never starts another step while one is open). ``due`` says
    whether its lookup time has come (a step nobody scheduled is due)."""
    return (
        Step.objects.filter(task_id=task_id, state__in=(StepState.PENDING, StepState.UNKNOWN))
        .annotate(due=Q(next_check_at__isnull=True) | Q(next_check_at__lte=Now()))
        .order_by("n")
        .first()
    )


def step_by_key(*, key: str) -> Step | None:
    return Step.objects.filter(key=key).first()
