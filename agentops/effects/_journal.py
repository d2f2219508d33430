"""What an app's own pages and provider notifications may use of the journal: read tasks and
steps, settle a step from a provider's report (monotone; a contradiction is a conflict),
note what arrived, start a task. The rest of the journal is agentops' own."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from agentops.models import WebhookEvent as ProviderEvent
from journal.entries import entries_add, entry
from journal.keys import UnsafeName, object_key, same_object
from journal.models import EntryKind, Step, Task
from journal.outcomes import LIVE_STATES, StepState
from journal.protocols import GUARD_REFUSALS, Refusal
from journal.selectors import step_by_key
from journal.settle import step_conflict, step_settle
from journal.status import FINAL


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
    "entries_add",
    "entry",
    "object_key",
    "same_object",
    "step_by_key",
    "step_conflict",
    "step_settle",
    "task_ring",
    "task_start",
]
