"""Writing decisions down before anything acts on them (DESIGN §4)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models.functions import Now

from journal.keys import step_key
from journal.leases import Lease, fence
from journal.models import Entry, EntryKind, Step, StepKind, Task, TaskStatus
from journal.outcomes import StepState
from journal.protocols import Call, Finish, Tool

GUARD_CONSTRAINT = "journal_step_one_live_effect_per_object"


def entry(
    *,
    kind: EntryKind,
    task_id: Any,
    step_id: int | None = None,
    actor: str = "",
    **data: Any,
) -> Entry:
    """An unsaved entry; services save their entries together with the change they log."""
    return Entry(task_id=task_id, step_id=step_id, kind=kind, actor=actor, data=data)


def _json(value: Any) -> Any:
    # Freeze exactly what will be stored, so every attempt sends what the journal holds.
    return json.loads(json.dumps(value))


def task_create(
    *, kind: str, goal: str, refs: Mapping[str, Any] | None = None, actor: str = ""
) -> Task:
    """Start a task: the task row and its first entry, in one transaction."""
    with transaction.atomic():
        task = Task.objects.create(kind=kind, goal=goal, refs=_json(dict(refs or {})))
        entry(kind=EntryKind.TASK_CREATED, task_id=task.pk, actor=actor, goal=goal).save()
    return task


def step_record(*, lease: Lease, decision: Call, tools: Mapping[str, Tool]) -> Step:
    """Record a decided call and start its first attempt, in one commit, before any call.

    The key is derived here from the step's id; nothing in ``decision`` can set it. A
    decision naming an unknown tool or carrying invalid arguments is recorded as a
    ``not_done`` step that never runs; one refused by the guard likewise. Returns the step;
    it is ``pending`` exactly when the caller must now perform it.
    """
    tool = tools.get(decision.tool)
    try:
        args = _json(dict(decision.args))
        problems = tool.validate(args) if tool is not None else []
    except (TypeError, ValueError) as exc:
        args, problems = {"unserialisable": repr(decision.args)[:2000]}, [str(exc)]
    raw = _json_or_repr(decision.raw)
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        return _record_settled_decision(
            lease=lease,
            decision=decision,
            args=args,
            raw=raw,
            kind=EntryKind.DECISION_REJECTED,
            proof=f"unknown tool {decision.tool!r} (known tools: {known}); nothing was run",
        )
    if problems:
        return _record_settled_decision(
            lease=lease,
            decision=decision,
            args=args,
            raw=raw,
            kind=EntryKind.DECISION_REJECTED,
            proof="invalid arguments: " + "; ".join(problems) + "; nothing was sent",
        )
    guard = tool.guard(args)
    try:
        with transaction.atomic():
            n = fence(lease, allocate_step=True)
            key = step_key(lease.task_id, n)
            step = Step.objects.create(
                task_id=lease.task_id,
                n=n,
                kind=StepKind.CALL,
                tool=tool.name,
                args=args,
                key=key,
                cost=tool.cost,
                guard=guard,
                state=StepState.PENDING,
                attempts=1,
                first_started_at=Now(),
                decision=raw,
            )
            Entry.objects.bulk_create(
                [
                    entry(
                        kind=EntryKind.STEP_RECORDED,
                        task_id=lease.task_id,
                        step_id=step.pk,
                        tool=tool.name,
                        key=key,
                        args=args,
                        guard=guard,
                    ),
                    entry(
                        kind=EntryKind.ATTEMPT_STARTED,
                        task_id=lease.task_id,
                        step_id=step.pk,
                        attempt=1,
                        key=key,
                    ),
                ]
            )
    except IntegrityError as exc:
        if guard is None or GUARD_CONSTRAINT not in str(exc):
            raise
        holder = (
            Step.objects.live().filter(guard=guard).values_list("key", flat=True).first() or "?"
        )
        return _record_settled_decision(
            lease=lease,
            decision=decision,
            args=args,
            raw=raw,
            kind=EntryKind.GUARD_REFUSED,
            proof=(
                f"refused: another {tool.name} on {guard.split(':', 1)[-1]} is in flight or "
                f"unknown (reference {holder}); this one was not started"
            ),
            guard=guard,
            refused_by=holder,
        )
    return step


def _json_or_repr(value: Any) -> Any:
    if value is None:
        return {}
    try:
        return _json(value)
    except (TypeError, ValueError):
        return {"repr": repr(value)[:10000]}


def _record_settled_decision(
    *,
    lease: Lease,
    decision: Call,
    args: Any,
    raw: Any,
    kind: EntryKind,
    proof: str,
    guard: str | None = None,
    **facts: Any,
) -> Step:
    with transaction.atomic():
        n = fence(lease, allocate_step=True)
        step = Step.objects.create(
            task_id=lease.task_id,
            n=n,
            kind=StepKind.CALL,
            tool=decision.tool[:100],
            args=args,
            key=step_key(lease.task_id, n),
            guard=guard,
            state=StepState.NOT_DONE,
            detail=proof,
            outcome={"proof": proof, **facts},
            settled_at=Now(),
            decision=raw,
        )
        entry(kind=kind, task_id=lease.task_id, step_id=step.pk, proof=proof, **facts).save()
    return step


def task_finish(*, lease: Lease, decision: Finish) -> Step:
    """Record the decision that the task is over; it is a step like any other."""
    with transaction.atomic():
        n = fence(lease, allocate_step=True)
        step = Step.objects.create(
            task_id=lease.task_id,
            n=n,
            kind=StepKind.FINISH,
            key=step_key(lease.task_id, n),
            state=StepState.DONE,
            detail=decision.summary,
            outcome={"evidence": {"summary": decision.summary}},
            settled_at=Now(),
            decision=_json_or_repr(decision.raw),
        )
        Task.objects.filter(pk=lease.task_id).update(status=TaskStatus.FINISHED)
        entry(
            kind=EntryKind.TASK_FINISHED,
            task_id=lease.task_id,
            step_id=step.pk,
            summary=decision.summary,
        ).save()
    return step


def task_flag(
    *, lease: Lease | None, task_id: Any, reason: str, step_id: int | None = None
) -> None:
    """Mark the task as needing a human, with the reason; the runner stops there."""
    with transaction.atomic():
        if lease is not None:
            fence(lease)
        Task.objects.filter(pk=task_id).update(status=TaskStatus.NEEDS_HUMAN, attention=reason)
        entry(kind=EntryKind.TASK_FLAGGED, task_id=task_id, step_id=step_id, reason=reason).save()
