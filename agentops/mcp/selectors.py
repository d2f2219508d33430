"""What the journal knows of an effect, told in three states (docs/design.md §2, §8).

An intent's effect is the business object it acts on (``charge:INV-2291``), wherever the
journal holds it: the effect that stands on the object (done, or in flight or unknown — at
most one, by the once-per-object guard), whichever task made it; else what became of the
intent's own task. Nothing here writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from uuid import UUID

from django.db.models import Q, QuerySet
from django.utils import timezone

from agentops.api.selectors import tasks_by_ref, tasks_seen
from agentops.kinds import tool_registry
from agentops.models import ApiClient, ApiScope, IntentClientKey, IntentKey
from journal.keys import KEY_PREFIX, UnsafeName, object_key
from journal.models import Entry, EntryKind, Step, StepKind, Task, TaskStatus
from journal.outcomes import StepState
from journal.status import FINAL

Status = Literal["done", "not_done", "unknown"]

# What a first attempt's error class says happened, in words a model reads right.
TIMEOUTS = frozenset({"ReadTimeout", "Timeout", "TimeoutError", "timeout", "socket.timeout"})
EFFECTS_MAX = 50
ADVANCING = (TaskStatus.RUNNABLE, TaskStatus.WAITING, TaskStatus.AWAITING_APPROVAL)


@dataclass(frozen=True)
class Answer:
    """One effect's outcome as the agent is told it (``wire`` renders it, ``state`` as the
    wire's ``status``)."""

    state: Status
    reason: str
    intent: str | None = None
    object: str | None = None
    reference: str | None = None
    """The effect's step key (``ao:<task>:<n>``): what is being checked, or what was done."""
    task: str | None = None
    task_status: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    at: datetime | None = None
    """When it was settled (done, not done), or when it was recorded."""
    expected_at: datetime | None = None
    """When the answer is expected: the next lookup of an unknown step, a retry's time."""
    waiting_for: str | None = None
    """What is being waited for, when nothing is certain yet."""
    refused: str | None = None
    """Why this call itself did nothing (its arguments, its key, the record), as a code."""
    repeated: bool = False
    """This call found an effect an earlier call (of any client) already asked for."""
    timed_out: bool = False
    tool: str | None = None
    lookups: int = 0
    noun: str = "effect"
    subject: str = ""


def _iso(at: datetime | None) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if at else ""


def _first_error(step: Step) -> str:
    first = (
        Entry.objects.filter(task_id=step.task_id, step=step, kind=EntryKind.ATTEMPT_ENDED)
        .order_by("id")
        .values_list("data", flat=True)
        .first()
    )
    return str((first or {}).get("error_class") or "")


def step_answer(step: Step, task: Task | None = None) -> Answer:
    """A step's outcome in three states: done with its evidence, not done with its proof, or
    unknown (in flight, or being looked up) with what is checked and when."""
    task = task or step.task
    base = Answer(
        state="unknown",
        reason=step.detail,
        object=step.guard,
        reference=step.key,
        task=str(step.task_id),
        task_status=task.status,
        tool=step.tool,
        lookups=step.lookups,
    )
    if step.state == StepState.DONE:
        undone = ""
        if step.offset_by_id is not None:
            undo = Step.objects.filter(pk=step.offset_by_id).only("tool", "key").first()
            undone = f"; later undone by {undo.tool} ({undo.key})" if undo else "; later undone"
        return replace(
            base,
            state="done",
            evidence=step.evidence,
            at=step.settled_at,
            reason=f"{step.detail or 'done'}{undone}",
        )
    if step.state == StepState.NOT_DONE:
        transient = bool(step.outcome.get("transient")) and task.status not in FINAL
        if transient or step.outcome.get("misconfigured") and task.status not in FINAL:
            # Nothing happened, and the task will try again: not settled for the agent.
            waits = (
                f"a person to fix agentops' configuration ({task.attention})"
                if task.status == TaskStatus.NEEDS_HUMAN
                else f"the task to try again at {_iso(task.wake_at)}"
            )
            return replace(
                base,
                reason=f"{step.detail}; nothing was sent, and it will be tried again",
                expected_at=_not_before_now(task.wake_at)
                if task.status == TaskStatus.WAITING
                else None,
                waiting_for=waits,
            )
        return replace(base, state="not_done", at=step.settled_at)
    # In flight or unknown: it may have happened.
    first = _first_error(step)
    timed_out = first in TIMEOUTS
    reason = step.detail or ("it is being attempted now" if step.state == StepState.PENDING else "")
    if timed_out and first not in reason:
        # What the agent is told is one sentence, said alike in the text and the fields
        # (wire.text): that the first call timed out, and what was seen since.
        reason = f"its first call timed out ({first}): the provider may have processed it" + (
            f"; since then, {reason}" if reason else ""
        )
    if step.state == StepState.PENDING:
        return replace(
            base,
            reason=reason,
            expected_at=_expected_in_flight(step, task),
            waiting_for=f"the provider's answer to {step.key}",
            timed_out=timed_out,
        )
    waiting = (
        f"a person: the lookups of {step.key} did not settle it ({task.attention})"
        if task.status == TaskStatus.NEEDS_HUMAN
        else f"the lookup of {step.key} at the provider"
    )
    return replace(
        base,
        reason=reason,
        expected_at=_not_before_now(step.next_check_at),
        waiting_for=waiting,
        timed_out=timed_out,
    )


def _not_before_now(at: datetime | None) -> datetime | None:
    """``at``, or now when it has passed: a check that is due (the worker is behind) is
    expected now, never at a time already gone."""
    return max(at, timezone.now()) if at is not None else None


def _expected_in_flight(step: Step, task: Task) -> datetime | None:
    """When a step in flight is expected to be settled: when its current attempt's call
    answers or times out (the attempt's start, not the first one's, plus the tool's
    timeout); once that has passed, when the lease of the runner that made it runs out and
    another looks it up (docs/design.md §11) — never before the step's own next check."""
    tool = tool_registry().get(step.tool)
    started = (
        Entry.objects.filter(task_id=step.task_id, step=step, kind=EntryKind.ATTEMPT_STARTED)
        .order_by("-id")
        .values_list("at", flat=True)
        .first()
    ) or (step.first_started_at or step.created_at)
    if tool is None or started is None:
        return _not_before_now(step.next_check_at or task.lease_expires_at)
    answered_by = started + timedelta(seconds=tool.timeout * max(1, tool.requests_per_call))
    later = [at for at in (step.next_check_at,) if at is not None]
    if answered_by <= timezone.now() and task.lease_expires_at is not None:
        later.append(task.lease_expires_at)
    return _not_before_now(max([answered_by, *later]))


def standing_effect(*, key: str, tasks: QuerySet[Task] | None = None) -> Step | None:
    """The effect that stands on the object (normal form ``key``): done and not undone, or in
    flight or unknown — whichever task made it (among ``tasks``, when given). Done first."""
    live = Q(state__in=(StepState.PENDING, StepState.UNKNOWN))
    done = Q(state=StepState.DONE, once=True, offset_by__isnull=True)
    steps = Step.objects.filter(live | done, guard_key=key, kind=StepKind.CALL).select_related(
        "task"
    )
    if tasks is not None:
        steps = steps.filter(task_id__in=tasks.values("pk"))
    found = sorted(steps, key=lambda s: (s.state != StepState.DONE, s.pk))
    return found[0] if found else None


def object_answer(
    *, key: str, label: str, task_id: UUID | None, tasks: QuerySet[Task] | None = None
) -> Answer:
    """What is known of the effect on an object: the effect that stands on it (among
    ``tasks``, when given); else the latest of the task's steps on it; else where the task
    is."""
    standing = standing_effect(key=key, tasks=tasks)
    if standing is not None:
        return step_answer(standing)
    if task_id is None:
        return Answer(state="not_done", object=label, reason=f"nothing was done for {label}")
    task = Task.objects.get(pk=task_id)
    mine = (
        Step.objects.filter(task_id=task_id, guard_key=key, kind=StepKind.CALL)
        .order_by("-n")
        .first()
    )
    if mine is not None:
        return step_answer(mine, task)
    where = Answer(
        state="unknown", object=label, task=str(task.pk), task_status=task.status, reason=""
    )
    if task.status in ADVANCING:
        return replace(
            where,
            reason=f"task {task.pk} was started for it and has not attempted it yet",
            # Runnable: it runs as soon as a worker is free; waiting: at its wake-up time.
            expected_at=_not_before_now(
                task.wake_at or (timezone.now() if task.status == TaskStatus.RUNNABLE else None)
            ),
            waiting_for=f"task {task.pk} to run",
        )
    if task.status == TaskStatus.NEEDS_HUMAN:
        return replace(
            where,
            reason=f"task {task.pk} needs a person before it goes on: {task.attention}",
            waiting_for="a person to look at the task",
        )
    finish = Step.objects.filter(task_id=task_id, kind=StepKind.FINISH).first()
    said = finish.detail if finish is not None else task.attention
    return replace(
        where,
        state="not_done",
        reason=f"task {task.pk} ended ({task.status}) without attempting it: {said}",
    )


def task_acted_on(*, task_id: UUID, key: str) -> bool:
    """Whether the task made an effect on the object that happened or may have (done, even if
    undone since; in flight; unknown): then the intent never starts another for it."""
    return Step.objects.filter(
        task_id=task_id,
        guard_key=key,
        kind=StepKind.CALL,
        state__in=(StepState.DONE, StepState.PENDING, StepState.UNKNOWN),
    ).exists()


def intent_answer(*, row: IntentKey) -> Answer:
    """The answer for an intent asked for: its effect, wherever the journal holds it."""
    return replace(
        object_answer(key=object_key(row.object), label=row.object, task_id=row.task_id),
        intent=row.intent,
    )


# --- Reading by reference -------------------------------------------------------------------


def _is_step_key(reference: str) -> bool:
    return reference.startswith(f"{KEY_PREFIX}:")


def _seen(client: ApiClient) -> QuerySet[Task] | None:
    """The tasks an MCP client is told of: those it started (over MCP or the HTTP API), or
    every task (None) when its token carries ``tasks:read:all``."""
    if client.sees_every_task(ApiScope.TASKS_READ.value):
        return None
    return tasks_seen(client=client, scope=ApiScope.TASKS_READ.value)


def check(*, reference: str, client: ApiClient) -> Answer | None:
    """What became of the effect a reference names (:func:`check_seen`), told of the tasks
    this client may read. An effect the journal holds only in another client's tasks is told
    as ``unknown``, with no task, evidence or step: "nothing was done" would be untrue, and
    the client is not told whose, or what became of it — the intent itself, asked again,
    tells it (and never acts twice)."""
    found = check_seen(reference=reference, client=client)
    if found is not None or _seen(client) is None:
        return found
    if check_seen(reference=reference, client=client, everything=True) is None:
        return None
    asked = reference.strip()
    return Answer(
        state="unknown",
        reason=f"{asked!r} names an effect of a task this client did not start, which it is "
        f"not told of (its token lacks the scope {ApiScope.TASKS_READ_ALL.value})",
        # Only what was asked, said back: the step's key, or the object's name.
        reference=asked if _is_step_key(asked) else None,
        object=None if _is_step_key(asked) else asked,
        waiting_for="the intent asked for again: it never acts twice, and tells what became "
        "of its effect",
    )


def check_seen(*, reference: str, client: ApiClient, everything: bool = False) -> Answer | None:
    """What became of the effect a reference names: a step's key (``ao:…``), this client's own
    idempotency key, an intent's key, or an object's name (``charge:INV-2291``). None when
    the journal knows nothing by that name — among the tasks this client started, unless it
    holds ``tasks:read:all``: another client's task is, to it, nothing. (Its own idempotency
    key answers what the intent call it named was answered, whoever's effect that was.)"""
    reference = reference.strip()
    if not reference or len(reference) > 255:
        return None
    seen = None if everything else _seen(client)
    if _is_step_key(reference):
        steps = Step.objects.filter(key=reference, kind=StepKind.CALL)
        if seen is not None:
            steps = steps.filter(task_id__in=seen.values("pk"))
        step = steps.select_related("task").first()
        if step is not None:
            standing = standing_effect(key=step.guard_key, tasks=seen) if step.guard_key else None
            if standing is not None and standing.pk != step.pk and step.state == StepState.NOT_DONE:
                # Refused for another effect on the object: that one is the answer.
                return step_answer(standing)
            return step_answer(step)
    own = IntentClientKey.objects.filter(client=client, key=reference).select_related("intent")
    alias = own.first()
    if alias is not None:
        return replace(intent_answer(row=alias.intent), repeated=True)
    try:
        key = object_key(reference)
    except UnsafeName:
        return None
    row = IntentKey.objects.filter(key=key).first()
    if row is not None and (
        seen is None
        or row.client_id == client.pk
        or (row.task_id is not None and seen.filter(pk=row.task_id).exists())
    ):
        return intent_answer(row=row)
    on_it = Step.objects.filter(guard_key=key, kind=StepKind.CALL)
    if seen is not None:
        on_it = on_it.filter(task_id__in=seen.values("pk"))
    latest = on_it.order_by("-pk").first()
    if latest is not None:
        return object_answer(key=key, label=reference, task_id=latest.task_id, tasks=seen)
    return None


@dataclass(frozen=True)
class Effect:
    """One effect the journal holds about a reference."""

    answer: Answer
    kind: str


def effects_for(*, reference: str, client: ApiClient) -> list[Effect]:
    """What has been done (or may have been) for a business reference — an invoice, a
    customer, a traveller — across the tasks ``client`` started (every task, with
    ``tasks:read:all``), newest first: every effect a task about it attempted (never a call
    refused before it was sent), with its evidence or reason and when."""
    reference = reference.strip()
    if not reference:
        return []
    seen = _seen(client)
    tasks = tasks_by_ref(reference, seen).values("pk")
    try:
        key = object_key(reference)
        on_it = Q(guard_key=key) | Q(guard_key__endswith=f":{key}")
    except UnsafeName:
        on_it = Q(pk__in=[])
    steps = (
        Step.objects.filter(Q(task_id__in=tasks) | on_it, kind=StepKind.CALL, refusal="")
        .exclude(cost="read")
        .filter(Q() if seen is None else Q(task_id__in=seen.values("pk")))
        .select_related("task")
        .order_by("-created_at", "-pk")[:EFFECTS_MAX]
    )
    return [Effect(answer=step_answer(s), kind=s.task.kind) for s in steps]
