"""What the API reads and answers, as pydantic models: the OpenAPI schema is made from them."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from ninja import Schema
from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

StepState = Literal["done", "not_done", "unknown", "in_flight"]


class Problem(Schema):
    """Why a request was not done, as a sentence (and, for refused refs, every problem)."""

    detail: str
    problems: list[str] = Field(default_factory=list)


class TaskIn(Schema):
    kind: str = Field(description="The task's kind: one an installed app declares.")
    goal: str = Field(description="What the task is for, in words (at most 2000 characters).")
    refs: dict[str, Any] = Field(
        default_factory=dict, description="The business references the kind's schema asks for."
    )
    plan: list[dict[str, Any]] | None = Field(
        default=None,
        description='A saga\'s plan: [{"tool": "<a tool of the kind>"}, {"tool": "<another>", '
        '"hold": true}, …], "hold" holding that step for a person\'s approval; the kind\'s '
        "own when left out.",
    )


def printable(value: str) -> str:
    """A text the journal records: line breaks and tabs, but no other control character (NUL
    above all, which PostgreSQL refuses in text): refused (422) before anything is done."""
    if any((ord(c) < 32 and c not in "\n\r\t") or ord(c) == 127 for c in value):
        raise PydanticCustomError("control_characters", "must not contain control characters")
    return value


class ReasonIn(Schema):
    reason: str = Field(min_length=1, max_length=2000, description="Why (recorded).")

    _printable = field_validator("reason")(printable)


class ApproveIn(Schema):
    approval_id: int = Field(description="The held step's approval (``held.approval_id``).")
    digest: str = Field(
        max_length=64,
        description="The digest of the tool and arguments you approve (``held.digest``): "
        "another step than the one you saw is refused.",
    )

    _printable = field_validator("digest")(printable)


class RejectIn(ReasonIn):
    approval_id: int = Field(description="The held step's approval (``held.approval_id``).")


class ReconcileIn(ReasonIn):
    step: int | None = Field(
        default=None, description="One step's number; without it, every unknown step."
    )


class StepOut(Schema):
    n: int
    tool: str
    state: StepState = Field(
        description="done (with evidence), not_done (with the reason or proof), unknown (it "
        "may have happened: being looked up), in_flight (being attempted now)"
    )
    args: dict[str, Any] = Field(description="The arguments, frozen when it was recorded.")
    key: str = Field(description="Its idempotency key at the provider.")
    object: str | None = Field(description="The business object it acts on.")
    once: bool = Field(description="Whether its effect happens once per object.")
    evidence: dict[str, Any] = Field(description="The provider's ids for it, when done.")
    reason: str = Field(description="Why it is not done or unknown ('' when done).")
    refusal: str = Field(description="The code of a refusal made before any call, if any.")
    attempts: int
    lookups: int
    next_check_at: datetime | None = Field(description="When it is looked up next, if unknown.")
    key_trusted_until: datetime | None
    settled_at: datetime | None
    undoes: int | None = Field(description="The step of this task it undoes, if an undo.")
    undone_by: int | None = Field(description="The step that undid it, if undone.")


class HeldOut(Schema):
    """A saga's step held for a person: approve it with ``approval_id`` and ``digest``."""

    approval_id: int = Field(description="Which request for approval this is.")
    tool: str = Field(description="The tool the step would call.")
    args: dict[str, Any] = Field(description="The arguments it would call it with, frozen.")
    digest: str = Field(description="The digest of the tool and arguments: approve with it.")
    reason: str = Field(description="Why the saga holds it.")
    requested_at: datetime
    expires_at: datetime = Field(description="After this, the saga decides again.")


class NotificationOut(Schema):
    """What NOTIFY_URL was told of this task, one event each (docs/operating/notifications.md)."""

    event: str = Field(description="needs_human, awaiting_approval, finished or compensated")
    key: str = Field(description="The Idempotency-Key it is sent with, every attempt.")
    state: str = Field(
        description="queued, sending, done (answered 2xx), not_done (refused, or never sent), "
        "unknown (may have arrived: retried while the key lives, then given up)"
    )
    attempts: int
    last_status: int | None = Field(description="The last answer's HTTP status, if any.")
    detail: str = Field(description="The last answer, in words.")
    evidence: dict[str, Any] = Field(description="When done: the status, and the receiver's id.")
    misconfigured: bool = Field(description="The receiver refused agentops itself: ours to fix.")
    next_attempt_at: datetime | None
    key_until: datetime
    settled_at: datetime | None


class WaitingForOut(Schema):
    """Another task's effect on the same object that this task's last step was refused for
    (in flight or unknown): the task waits for it to settle, then decides from its outcome."""

    task: UUID = Field(description="The task whose effect it waits for.")
    tool: str
    object: str = Field(description="The business object both act on.")
    state: str = Field(description="in_flight or unknown.")
    with_person: bool = Field(
        description="That task is with a person (needs_human or awaiting_approval): this one "
        "waits for their decision."
    )


class TaskOut(Schema):
    id: UUID
    kind: str
    goal: str
    status: str = Field(
        description="runnable, waiting, awaiting_approval, needs_human, finished, cancelled "
        "or compensated"
    )
    attention_code: str = Field(description="Why it needs a person, as a code ('' if not).")
    attention: str = Field(description="Why it needs a person, as a sentence.")
    refs: dict[str, Any]
    plan: list[dict[str, Any]]
    summary: str | None = Field(description="What it did, from the journal, once finished.")
    shortfall: bool = Field(description="Finished without every effect it decided.")
    running_now: bool = Field(description="A worker holds its lease now.")
    created_at: datetime
    held: HeldOut | None
    steps: list[StepOut]
    notifications: list[NotificationOut]
    waiting_for: WaitingForOut | None = Field(
        default=None,
        description="Another task's effect on the same object it waits for, if it does.",
    )


class TaskBrief(Schema):
    """A task in a list: read it whole at ``/api/v1/tasks/{task_id}``."""

    id: UUID
    kind: str
    status: str
    attention_code: str
    attention: str
    refs: dict[str, Any]
    step_count: int
    created_at: datetime


class TaskPageOut(Schema):
    """One page of tasks, newest first."""

    items: list[TaskBrief]
    page: int = Field(description="This page's number, from 1.")
    pages: int = Field(description="How many pages there are.")
    total: int = Field(description="How many tasks there are, on every page.")
    next_page: int | None = Field(description="The next page's number, if there is one.")


class AlreadyDoneFact(Schema):
    """The once-only effect that already stands done, as the journal holds it."""

    tool: str = Field(description="The tool whose effect it is.")
    object: str = Field(description="The business object it acted on.")
    evidence: dict[str, Any] = Field(description="The provider's ids for it.")
    step_key: str = Field(description="The step's idempotency key at the provider.")
    task_id: UUID = Field(description="The task whose step did it.")
    settled_at: datetime | None = Field(description="When it was known done.")


class AlreadyDoneOut(Schema):
    """The effect this task would be for already stands done: nothing was started."""

    already_done: AlreadyDoneFact
