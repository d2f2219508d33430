"""What an app's own pages and provider notifications may use of the journal: read tasks and
steps, settle a step from a provider's report (monotone; a contradiction is a conflict),
note what arrived, leave a note on a task's history, start a task. The rest of the journal
is agentops' own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from agentops.models import WebhookEvent as ProviderEvent
from agentops.telemetry.steps import event_observed, report_observed
from journal.entries import note, task_note
from journal.keys import UnsafeName, object_key, same_object
from journal.models import EntryKind, Step, Task
from journal.outcomes import LIVE_STATES, Outcome, StepState
from journal.protocols import GUARD_REFUSALS, Refusal
from journal.selectors import step_by_key
from journal.settle import step_conflict as _step_conflict
from journal.settle import step_noted
from journal.settle import step_settle as _step_settle
from journal.status import FINAL


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
    is committed, it is counted and a settlement logged (agentops/telemetry)."""
    changed = _step_settle(step_id=step_id, outcome=outcome, via=via, notes=notes, actor=actor)
    report_observed(step_id=step_id, provider=actor, reported=outcome.state, changed=changed)
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
    """Store a provider's notification as received (the web server's move: it settles
    nothing), for a worker to verify and apply with the app's ``register_event_applier``.
    Returns whether it was new. See agentops/provider_events.py."""
    from agentops.provider_events import provider_event_store

    return provider_event_store(
        provider=provider, event_id=event_id, type=type, payload=payload, signature=signature
    )


def task_start(**kwargs: Any) -> Task:
    """Start a task (``kind``, ``goal``, ``refs``, ``actor``, ``plan``): agentops.runner's."""
    from agentops.runner import task_start as start

    return start(**kwargs)


def task_ring(*, task_id: UUID) -> None:
    """Have a worker advance the task now (a settled step woke it)."""
    from agentops.runner import task_ring as ring

    ring(task_id=task_id)


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
