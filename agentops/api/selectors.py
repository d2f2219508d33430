"""What the API reads: a task as the operators' task page reads it (its queries, its rows),
and tasks by business reference."""

from __future__ import annotations

import uuid

from django.core.paginator import Paginator
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.db.models.functions import Now

from agentops.api.schemas import (
    HeldOut,
    NotificationOut,
    StepOut,
    TaskBrief,
    TaskOut,
    TaskPageOut,
    WaitingForOut,
)
from agentops.models import ApiClient
from agentops.operators import selectors as pages
from journal.keys import UnsafeName, object_key
from journal.models import Entry, EntryKind, Step, Task
from journal.outcomes import StepState

PER_PAGE = 25
PER_PAGE_MAX = 100
REF_MAX_LENGTH = 255

STATE_NAMES = {
    StepState.DONE: "done",
    StepState.NOT_DONE: "not_done",
    StepState.UNKNOWN: "unknown",
    StepState.PENDING: "in_flight",
}


def tasks_seen(*, client: ApiClient, scope: str) -> QuerySet[Task]:
    """The tasks ``client`` reaches with ``scope``: every task if its token carries the scope
    that widens it (``tasks:read:all``…), else only those it started, over the API or MCP.

    Who started a task is what the journal already says: its first entry (``task_created``,
    written with the task by ``journal_task_create``) names ``api:<client>`` or
    ``mcp:<client>``. Looked up by the entries' one index, (task, id), for each task asked
    about; nothing new is written, and the journal's tables are as they were."""
    tasks = Task.objects.all()
    if client.sees_every_task(scope):
        return tasks
    started = Entry.objects.filter(
        task_id=OuterRef("pk"), kind=EntryKind.TASK_CREATED, actor__in=client.actors
    )
    return tasks.filter(Exists(started))


def task_seen(*, task_id: uuid.UUID, client: ApiClient, scope: str) -> bool:
    """Whether ``client`` reaches the task with ``scope``. Another client's task is, to it,
    no task at all (404, as one that does not exist: it is not told that it exists)."""
    return tasks_seen(client=client, scope=scope).filter(pk=task_id).exists()


def task_out(*, task_id: uuid.UUID) -> TaskOut:
    """The task, its steps, what is held for a person and what NOTIFY_URL was told. Raises
    ``Task.DoesNotExist``."""
    page = pages.task_page(task_id=task_id)
    task = page.task
    steps = []
    for row in page.rows:
        s = row.step
        state = STATE_NAMES[StepState(s.state)]
        steps.append(
            StepOut(
                n=s.n,
                tool=s.tool,
                state=state,  # type: ignore[arg-type]
                args=s.args,
                key=s.key,
                object=s.guard,
                once=s.once,
                evidence=s.evidence if s.state == StepState.DONE else {},
                reason="" if s.state == StepState.DONE else s.detail,
                refusal=s.refusal,
                attempts=s.attempts,
                lookups=s.lookups,
                next_check_at=s.next_check_at if s.state == StepState.UNKNOWN else None,
                key_trusted_until=s.key_trusted_until,
                settled_at=s.settled_at,
                undoes=s.offsets_n,  # type: ignore[attr-defined]
                undone_by=row.undone_by,
            )
        )
    held = page.held
    return TaskOut(
        id=task.pk,
        kind=task.kind,
        goal=task.goal,
        status=task.status,
        attention_code=task.attention_code,
        attention=task.attention,
        refs=task.refs if isinstance(task.refs, dict) else {},
        plan=task.plan if isinstance(task.plan, list) else [],
        summary=page.finish.detail if page.finish is not None else None,
        shortfall=task.shortfall,
        running_now=page.running_now,
        created_at=task.created_at,
        held=None
        if held is None
        else HeldOut(
            approval_id=held.pk,
            tool=held.tool,
            args=held.args,
            digest=held.digest,
            reason=held.reason,
            requested_at=held.requested_at,
            expires_at=held.expires_at,
        ),
        steps=steps,
        notifications=[
            NotificationOut(
                event=d.event,
                key=d.key,
                state=d.state,
                attempts=d.attempts,
                last_status=d.last_status,
                detail=d.detail,
                evidence=d.evidence,
                misconfigured=d.misconfigured,
                next_attempt_at=d.next_attempt_at,
                key_until=d.key_until,
                settled_at=d.settled_at,
            )
            for d in page.deliveries
        ],
        waiting_for=None
        if (w := page.waiting_for) is None
        else WaitingForOut(
            task=w.task,
            tool=w.tool,
            object=w.object,
            state="in_flight" if w.state == "in flight" else w.state,
            with_person=w.with_person,
        ),
    )


def tasks_by_ref(ref: str, tasks: QuerySet[Task] | None = None) -> QuerySet[Task]:
    """Tasks about a business reference, newest first: what the operators' search finds (a
    reference its kind declares, such as a renewal's invoice or each invoice of a reminders
    batch; a provider's id in a step's evidence; a step's key; the task's id), or a task one
    of whose steps acted on the object — its whole name (``charge:INV-2291``) or its last
    part (``INV-2291``), compared in the journal's normal form. Among ``tasks`` (a client's,
    :func:`tasks_seen`) when given, else among all."""
    ref = ref.strip()
    tasks = (Task.objects.all() if tasks is None else tasks).order_by("-created_at", "pk")
    if not ref:
        return tasks
    if len(ref) > REF_MAX_LENGTH or "\x00" in ref:
        return tasks.none()
    found = Q(pk__in=pages.tasks_matching(state="", q=ref).values("pk"))
    try:
        key = object_key(ref)
    except UnsafeName:
        return tasks.filter(found)
    acted_on = Step.objects.filter(Q(guard_key=key) | Q(guard_key__endswith=f":{key}"))
    return tasks.filter(found | Q(pk__in=acted_on.values("task_id")))


def task_page_out(
    *, ref: str, page: int, per_page: int, tasks: QuerySet[Task] | None = None
) -> TaskPageOut:
    per_page = min(max(per_page, 1), PER_PAGE_MAX)
    paginator = Paginator(
        tasks_by_ref(ref, tasks).only(
            "id",
            "kind",
            "status",
            "attention_code",
            "attention",
            "refs",
            "step_count",
            "created_at",
        ),
        per_page,
    )
    found = paginator.get_page(page)
    return TaskPageOut(
        items=[
            TaskBrief(
                id=t.pk,
                kind=t.kind,
                status=t.status,
                attention_code=t.attention_code,
                attention=t.attention,
                refs=t.refs if isinstance(t.refs, dict) else {},
                step_count=t.step_count,
                created_at=t.created_at,
            )
            for t in found.object_list
        ],
        page=found.number,
        pages=paginator.num_pages,
        total=paginator.count,
        next_page=found.next_page_number() if found.has_next() else None,
    )


def unknown_steps(*, task_id: uuid.UUID, n: int | None) -> list[int]:
    """The steps a *Reconcile now* of this task looks up: the one numbered ``n`` if it is
    unknown, or in flight with no runner holding the task (as the task page offers it), or
    else every unknown one."""
    if n is not None:
        abandoned = Q(state=StepState.PENDING) & ~Q(task__lease_expires_at__gt=Now())
        return list(
            Step.objects.filter(
                Q(state=StepState.UNKNOWN) | abandoned, task_id=task_id, n=n
            ).values_list("pk", flat=True)
        )
    return pages.unknown_steps_of(tasks=Task.objects.filter(pk=task_id))
