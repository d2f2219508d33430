"""What a task refused by the guard waits for (issue 38): another task's effect on the same
object, in flight or unknown (docs/design.md §6). Read from the journal as it is — the
refused step names the step that stood in its way (``outcome.refused_by``) — so a task
waiting on an effect that went to a person is shown, and counted, as needing a person too,
without a status of its own (docs/design.md §7, "A task waiting on another's effect").

The list reads it in the same query as its rows (a correlated subquery per row, by the
steps' (task, n) and (key, task) indexes); a task's page in one more query, only when its
last step was refused this way.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db.models import Case, Exists, JSONField, OuterRef, Q, Subquery, Value, When
from django.db.models.fields.json import KT
from django.db.models.functions import JSONObject

from agentops.kinds import references_of
from journal.models import Step, Task, TaskStatus
from journal.outcomes import LIVE_STATES, StepState
from journal.protocols import Refusal
from journal.status import ADVANCING

# A holder's task in one of these is with a person: nothing settles its step until they act.
WITH_PERSON = (TaskStatus.NEEDS_HUMAN, TaskStatus.AWAITING_APPROVAL)


@dataclass(frozen=True)
class WaitingFor:
    """The effect a blocked task waits for: its task, tool, object and state, and whether
    that task is with a person."""

    task: uuid.UUID
    tool: str
    object: str
    state: str
    """``unknown`` or ``in flight``."""
    task_status: str
    task_kind: str = ""
    task_refs: Any = None

    @property
    def with_person(self) -> bool:
        return self.task_status in WITH_PERSON

    @property
    def needs_person(self) -> bool:
        """Whether the holder's task was handed to a person (``needs_human``): then the
        waiting task needs one too."""
        return self.task_status == TaskStatus.NEEDS_HUMAN

    @property
    def label(self) -> str:
        """The holder's task as people name it: its reference, else its kind."""
        refs = self.task_refs if isinstance(self.task_refs, dict) else {}
        found = references_of(self.task_kind, refs) if self.task_kind else []
        return found[0] if found else f"{self.task_kind or 'task'} {str(self.task)[:8]}"

    @property
    def words(self) -> str:
        """``unknown, with a person``: what the holder's effect is now, in words."""
        return f"{self.state}, with a person" if self.with_person else self.state

    @classmethod
    def of(cls, row: Any) -> WaitingFor | None:
        """From the list's annotation (a JSON object), or None."""
        if not isinstance(row, dict) or not row.get("task"):
            return None
        state = str(row.get("state") or "")
        return cls(
            task=uuid.UUID(str(row["task"])),
            tool=str(row.get("tool") or ""),
            object=str(row.get("object") or ""),
            state="in flight" if state == StepState.PENDING else state,
            task_status=str(row.get("status") or ""),
            task_kind=str(row.get("kind") or ""),
            task_refs=row.get("refs"),
        )


def _refused_by() -> Subquery:
    """The key of the step that stood in the way of the outer task's last step, when the
    guard refused it as in flight (else NULL)."""
    last = Step.objects.filter(task_id=OuterRef(OuterRef("pk"))).order_by("-n")
    return Subquery(
        last.values(
            by=Case(
                When(refusal=Refusal.IN_FLIGHT, then=KT("outcome__refused_by")),
                default=Value(None),
            )
        )[:1]
    )


def _holders() -> Any:
    """The live step of another task that the outer task's last step was refused for."""
    return Step.objects.filter(key=_refused_by(), state__in=LIVE_STATES).exclude(
        task_id=OuterRef("pk")
    )


def waiting_for_annotation() -> Case:
    """For the list: the effect each advancing task waits for, as a JSON object (NULL when
    it waits for none), in the row's own query."""
    holder = _holders().values(
        w=JSONObject(
            task="task_id",
            tool="tool",
            object="guard",
            state="state",
            status="task__status",
            kind="task__kind",
            refs="task__refs",
        )
    )[:1]
    return Case(
        When(status__in=ADVANCING, then=Subquery(holder)),
        default=Value(None),
        output_field=JSONField(),
    )


def waits_on_person() -> Q:
    """Tasks waiting for an effect whose task was handed to a person: they need one too.
    The cheap condition first, so the subquery is asked only of advancing tasks."""
    return Q(status__in=ADVANCING) & Q(
        Exists(_holders().filter(task__status=TaskStatus.NEEDS_HUMAN))
    )


def waiting_for_of(task: Task, last: Step | None) -> WaitingFor | None:
    """For a task's page: what its last step (``last``) waits for, in one query when it was
    refused as in flight, none otherwise."""
    if task.status not in ADVANCING or last is None or last.refusal != Refusal.IN_FLIGHT:
        return None
    key = last.outcome.get("refused_by") if isinstance(last.outcome, dict) else None
    if not key:
        return None
    row = (
        Step.objects.filter(key=key, state__in=LIVE_STATES)
        .exclude(task_id=task.pk)
        .values("task_id", "tool", "guard", "state", "task__status", "task__kind", "task__refs")
        .first()
    )
    if row is None:
        return None
    return WaitingFor.of(
        {
            "task": row["task_id"],
            "tool": row["tool"],
            "object": row["guard"],
            "state": row["state"],
            "status": row["task__status"],
            "kind": row["task__kind"],
            "refs": row["task__refs"],
        }
    )
