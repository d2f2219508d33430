"""What an app's own pages and provider notifications may use of the journal: start a task,
read tasks and steps, store a provider's notification for a worker to apply, settle a step
from a provider's report (monotone; a contradiction is a conflict), note what arrived, leave
a note on a task's history. The rest of the journal is agentops' own.

This is the extension API's layer: it rings for workers (agentops/doorbell.py) and imports
none of agentops' services (the runner, the people's decisions, the pages, the HTTP API);
they build on it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any
from uuid import UUID

from django.db import connection, transaction

from agentops.doorbell import provider_event_ring
from agentops.doorbell import task_ring as _task_ring
from agentops.effects._kind import TaskRefused, plan_problems, task_problems
from agentops.effects._registry import kind_get, tools
from agentops.models import WebhookEvent as ProviderEvent
from agentops.telemetry.steps import event_observed, report_observed
from journal.entries import note, task_note
from journal.keys import UnsafeName, object_key, same_object
from journal.models import EntryKind, Step, Task
from journal.outcomes import LIVE_STATES, Outcome, StepState
from journal.protocols import GUARD_REFUSALS, Refusal
from journal.record import task_create
from journal.selectors import step_by_key
from journal.settle import step_conflict as _step_conflict
from journal.settle import step_noted
from journal.settle import step_settle as _step_settle
from journal.status import FINAL, waiters_wake


def step_settle(
    *,
    step_id: int,
    outcome: Outcome,
    via: str,
    notes: Sequence[Mapping[str, Any]] = (),
    actor: str = "",
) -> bool:
    """Settle a step from a provider's report (``journal.settle.step_settle``: monotone; a
    report that contradicts a settled step is a conflict, and its task goes to a person),
    with ``notes`` of what arrived (``note(EntryKind.WEBHOOK_RECEIVED, ...)``). Returns
    whether it changed the step. ``actor`` names the provider (``stripe``); once the report
    is committed, it is counted and a settlement logged (agentops/telemetry). The tasks the
    guard kept waiting on the step are woken and rung once it is committed (docs/design.md
    §7); its own task is the caller's to ring."""
    changed = _step_settle(step_id=step_id, outcome=outcome, via=via, notes=notes, actor=actor)
    report_observed(step_id=step_id, provider=actor, reported=outcome.state, changed=changed)
    if changed:
        key = Step.objects.filter(pk=step_id).values_list("key", flat=True).get()
        for waiter in waiters_wake(key=key, actor=actor or "provider"):
            transaction.on_commit(partial(_task_ring, task_id=waiter))
    return changed


def step_conflict(
    *,
    step: Step,
    reason: str,
    via: str,
    actor: str = "",
    notes: Sequence[Mapping[str, Any]] = (),
    **facts: Any,
) -> None:
    """Record that a provider's report does not fit the step it names (another amount, another
    kind of step), beside ``notes`` of what arrived: the step is left as it is and its task
    goes to a person."""
    _step_conflict(step=step, reason=reason, via=via, actor=actor, notes=notes, **facts)
    report_observed(step_id=step.pk, provider=actor, reported="conflict", changed=False)


def provider_event_observed(*, provider: str, outcome: str) -> None:
    """Count a provider's notification (a webhook delivery) by what became of it: ``applied``,
    ``unchanged``, ``conflict``, ``ignored``, ``duplicate``, ``refused`` or ``failed``
    (``agentops_webhook_events_total``), once the current transaction commits. Call it once
    per delivery, refused ones included."""
    event_observed(provider=provider, outcome=outcome)


def store_provider_event(
    *, provider: str, event_id: str, type: str, payload: str, signature: str
) -> bool:
    """Store a provider's notification as received, once by its id (the web server's move:
    it settles nothing), and ring for a worker to verify and apply it with the app's
    ``register_event_applier`` once this is committed (agentops/provider_events.py).
    ``payload`` and ``signature`` are kept exactly as they arrived, so that the worker checks
    the provider's signature itself. Returns whether it was new (False: a delivery again)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO agentops_webhookevent
                (id, provider, type, facts, received_at, result, payload, signature)
            VALUES (%s, %s, %s, '{}'::jsonb, now(), '', %s, %s)
            ON CONFLICT (id) DO NOTHING
            RETURNING id
            """,
            [event_id, provider, type[:100], payload, signature[:1000]],
        )
        stored = cursor.fetchone() is not None
    if stored:
        transaction.on_commit(lambda: provider_event_ring(provider=provider, event_id=event_id))
    return stored


def task_start(
    *,
    kind: str,
    goal: str,
    refs: dict[str, Any] | None = None,
    actor: str = "",
    plan: list[dict[str, Any]] | None = None,
) -> Task:
    """Record a task, then ring for a worker once the record is committed (one statement:
    journal_task_create).

    Refuses (:class:`TaskRefused`, nothing recorded) an unknown kind (``UnknownKind``), and a
    goal or refs that the kind does not accept: a task whose refs lack an amount would
    otherwise fail on every run, and one whose receipt address is not an address would
    charge before it failed. A saga's ``plan`` (its kind's default when not given) is
    checked against the declared tools.
    """
    task_kind = kind_get(kind)
    problems = task_problems(kind=task_kind, goal=goal, refs=refs or {})
    if plan is not None or task_kind.saga is not None:
        plan = plan if plan is not None else task_kind.saga.default_plan()  # type: ignore[union-attr]
        problems += plan_problems(kind=task_kind, plan=plan, tools=tools())
    if problems:
        raise TaskRefused(problems)
    # One statement, committed by itself (one round trip), unless a caller's transaction holds
    # it: the ring goes once it is committed, now or when that transaction commits.
    task = task_create(kind=kind, goal=goal, refs=refs or {}, actor=actor, plan=plan or [])
    task_id = task.pk
    transaction.on_commit(lambda: _task_ring(task_id=task_id))
    return task


def task_ring(*, task_id: UUID) -> None:
    """Have a worker advance the task now (a settled step woke it). Losing this loses
    nothing: the sweeper finds a runnable task nobody holds."""
    _task_ring(task_id=task_id)


__all__ = [
    "FINAL",
    "GUARD_REFUSALS",
    "LIVE_STATES",
    "EntryKind",
    "ProviderEvent",
    "Refusal",
    "Step",
    "StepState",
    "Task",
    "UnsafeName",
    "note",
    "object_key",
    "provider_event_observed",
    "same_object",
    "step_by_key",
    "step_conflict",
    "step_noted",
    "step_settle",
    "store_provider_event",
    "task_note",
    "task_ring",
    "task_start",
]
