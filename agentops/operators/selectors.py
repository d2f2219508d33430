"""What the operators' pages read: a fixed number of queries, whatever the journal's size.

The list: one query for the counters, one for the page's rows (with what each row shows
annotated), one count for the paginator, one for the tasks needing a person. A task: one
query each for the task, its steps, its entries, its approvals, its notifications and its
provider audit findings — a 200-step task costs what a 2-step one does.

Each page also has a **fingerprint** of what it shows, so a poll whose page has not changed
gets a 204. It is computed from the rows themselves, never from "entries after id N":
entry ids are not in commit order, and a poll must not miss a row.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet
from django.db.models.functions import Now
from django.utils.safestring import SafeString

from agentops.audit.models import Finding
from agentops.audit.selectors import findings_of
from agentops.kinds import kinds
from agentops.notifications.models import Delivery
from agentops.notifications.selectors import deliveries_of
from agentops.operators.timeline import Event, Timeline, step_timeline
from agentops.tools import tool_registry
from journal.models import Approval, ApprovalState, Entry, Step, StepKind, Task, TaskStatus
from journal.outcomes import StepState
from journal.protocols import StepFact
from journal.selectors import task_facts_of
from journal.status import ADVANCING

PER_PAGE = 25


def _unknown_steps() -> Exists:
    return Exists(Step.objects.filter(task=OuterRef("pk"), state=StepState.UNKNOWN))


# The list's filters: name → (label, condition). Kept in the URL as ?state=…
FILTERS: dict[str, tuple[str, Q]] = {
    "attention": ("needs attention", Q(status=TaskStatus.NEEDS_HUMAN)),
    "unknown": ("unknown", Q(has_unknown=True)),
    "approval": ("awaiting approval", Q(status=TaskStatus.AWAITING_APPROVAL)),
    "running": ("running", Q(status__in=ADVANCING)),
    "finished": ("finished", Q(status=TaskStatus.FINISHED, shortfall=False)),
    "compensated": ("compensated", Q(status=TaskStatus.COMPENSATED)),
    # Over without every effect it decided: cancelled, or finished short (its summary says
    # which effect did not happen and why). Never a task whose outcome is unknown.
    "failed": (
        "failed",
        Q(status=TaskStatus.CANCELLED) | Q(status=TaskStatus.FINISHED, shortfall=True),
    ),
}


def task_counts() -> dict[str, int]:
    """How many tasks each filter shows: one query."""
    counts = Task.objects.aggregate(
        all=Count("pk"),
        **{
            name: Count("pk", filter=condition)
            for name, (_, condition) in FILTERS.items()
            if name != "unknown"
        },
    )
    unknown = Step.objects.filter(state=StepState.UNKNOWN).values("task_id").distinct().count()
    return {**counts, "unknown": unknown}


# Far longer than any reference, step key (255) or provider's id the journal holds.
SEARCH_MAX_LENGTH = 1000


def _searchable(q: str) -> bool:
    """Whether ``q`` could be in the journal at all: PostgreSQL holds no NUL in text or jsonb,
    and no lone surrogate (psycopg cannot even send one). Compared as they are, they would
    make the query fail."""
    try:
        q.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in q and len(q) <= SEARCH_MAX_LENGTH


def _search(q: str) -> Q:
    """Tasks matching a business reference, a step key, a provider's id or a task id; any
    text at all (a search that cannot be in the journal matches nothing)."""
    q = q.strip()
    if not q:
        return Q()
    if not _searchable(q):
        return Q(pk__in=[])
    try:
        return Q(pk=uuid.UUID(q))
    except ValueError:
        pass
    by_evidence = Q(key=q)  # a step's key
    for name in sorted({n for tool in tool_registry().values() for n in tool.searchable}):
        by_evidence |= Q(**{f"outcome__evidence__{name}": q})
    by_refs = Q()
    for path in sorted({p for kind in kinds().values() for p in kind.references}):
        by_refs |= _reference_q(path.split("."), q)
    return by_refs | Q(pk__in=Step.objects.filter(by_evidence).values("task_id"))


def _reference_q(path: list[str], q: str) -> Q:
    """Tasks whose refs hold ``q`` at ``path`` (``invoice``; ``invoices.*.invoice``)."""
    if "*" not in path:
        return Q(**{"refs__" + "__".join(path) + "__iexact": q})
    star = path.index("*")
    nested: Any = q
    for part in reversed(path[star + 1 :]):
        nested = {part: nested}
    return Q(**{"refs__" + "__".join(path[:star]) + "__contains": [nested]})


@dataclass(frozen=True)
class TaskList:
    page: Page[Task]
    attention: list[Task]
    counts: dict[str, int]
    state: str
    q: str
    in_flight: bool
    fingerprint: str


def task_list(*, state: str = "", q: str = "", page: int | str = 1) -> TaskList:
    """The tasks an operator asked for, newest first; those needing a person come first on
    the page, in their own panel."""
    rows: QuerySet[Task] = Task.objects.annotate(
        has_unknown=_unknown_steps(),
        running_now=Q(lease_expires_at__gt=Now()),
    ).order_by("-created_at")
    if state in FILTERS:
        rows = rows.filter(FILTERS[state][1])
    rows = rows.filter(_search(q))
    paged = Paginator(rows, PER_PAGE).get_page(page)
    attention: list[Task] = []
    if not state and not q:
        attention = list(
            Task.objects.filter(
                status__in=[TaskStatus.NEEDS_HUMAN, TaskStatus.AWAITING_APPROVAL]
            ).order_by("-created_at")[:10]
        )
    counts = task_counts()
    listed = list(paged.object_list)
    in_flight = any(t.status in ADVANCING for t in listed) or counts["running"] > 0
    seen = [
        (str(t.pk), t.status, t.attention_code, t.step_count, t.has_unknown, t.running_now)  # type: ignore[attr-defined]
        for t in listed
    ] + [(str(t.pk), t.status) for t in attention]
    return TaskList(
        page=paged,
        attention=attention,
        counts=counts,
        state=state if state in FILTERS else "",
        q=q,
        in_flight=in_flight,
        fingerprint=fingerprint(seen, counts, paged.number),
    )


def fingerprint(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, default=str, sort_keys=True).encode()).hexdigest()[:16]


# --- One task ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepRow:
    step: Step
    fact: StepFact | None
    badge: str
    timeline: Timeline
    undone_by: int | None = None
    key_left_s: float | None = None
    result_text: str = ""

    @property
    def svg(self) -> SafeString:
        return self.timeline.svg(label=f"timeline of step {self.step.n}")

    @property
    def events(self) -> SafeString:
        return self.timeline.events_html()


@dataclass(frozen=True)
class TaskPage:
    task: Task
    rows: list[StepRow]
    held: Approval | None
    approvals: list[Approval]
    running_now: bool
    live: bool
    fingerprint: str
    operator_entries: list[Event] = field(default_factory=list)
    finish: Step | None = None
    deliveries: list[Delivery] = field(default_factory=list)
    """What NOTIFY_URL was told of this task (agentops/notifications)."""
    findings: list[Finding] = field(default_factory=list)
    """What the provider audit found of this task's effects (agentops/audit)."""


def _badge(step: Step) -> str:
    if step.state == StepState.DONE and step.offset_by_id is not None:
        return "compensated"
    return {
        StepState.DONE: "done",
        StepState.NOT_DONE: "not done",
        StepState.UNKNOWN: "unknown",
        StepState.PENDING: "in flight",
    }[StepState(step.state)]


def task_page(*, task_id: uuid.UUID) -> TaskPage:
    """Everything a task's page shows, in five queries."""
    task = Task.objects.annotate(running_now=Q(lease_expires_at__gt=Now()), db_now=Now()).get(
        pk=task_id
    )
    steps = list(
        Step.objects.filter(task_id=task_id)
        .annotate(offsets_n=F("offsets__n"))
        .defer("first_started_at", "lookup_until", "created_at")  # not shown: not parsed
        .order_by("n")
    )
    # Tuples, not models: a long task has thousands of entries, and the page needs four fields.
    entries = [
        (step_id, Event(kind, at, data, actor))
        for step_id, kind, at, data, actor in Entry.objects.filter(task_id=task_id)
        .order_by("at", "id")
        .values_list("step_id", "kind", "at", "data", "actor")
    ]
    approvals = list(Approval.objects.filter(task_id=task_id).order_by("-requested_at"))
    facts = {f.n: f for f in task_facts_of(task=task, steps=steps).steps}
    by_step: dict[int | None, list[Event]] = defaultdict(list)
    for step_id, event in entries:
        by_step[step_id].append(event)
    now: datetime = task.db_now  # type: ignore[attr-defined]
    n_of = {s.pk: s.n for s in steps}
    rows = []
    finish = None
    for s in steps:
        if s.kind == StepKind.FINISH:
            finish = s
            continue
        left = None
        if s.key_trusted_until is not None and s.state in (StepState.PENDING, StepState.UNKNOWN):
            left = max((s.key_trusted_until - now).total_seconds(), 0.0)
        fact = facts.get(s.n)
        rows.append(
            StepRow(
                step=s,
                fact=fact,
                badge=_badge(s),
                timeline=step_timeline(by_step.get(s.pk, [])),
                undone_by=n_of.get(s.offset_by_id) if s.offset_by_id else None,
                key_left_s=left,
                result_text=fact.result_text() if fact is not None else "",
            )
        )
    held = next((a for a in approvals if a.state == ApprovalState.PENDING), None)
    deliveries = deliveries_of(task_id=task_id)
    findings = findings_of(task_id=task_id)
    # A notification still being tried keeps the page polling after the task is over.
    live = task.status in (*ADVANCING, TaskStatus.AWAITING_APPROVAL) or any(
        d.settled_at is None for d in deliveries
    )
    seen = (
        task.status,
        task.attention_code,
        task.step_count,
        task.running_now,  # type: ignore[attr-defined]
        task.lease_owner,
        [(s.n, s.state, s.attempts, s.lookups, s.offset_by_id) for s in steps],
        len(entries),
        [(a.pk, a.state) for a in approvals],
        [(d.pk, d.state, d.attempts, d.settled_at) for d in deliveries],
        [(f.pk, f.resolved_at) for f in findings],
    )
    return TaskPage(
        task=task,
        rows=rows,
        held=held,
        approvals=approvals,
        running_now=bool(task.running_now),  # type: ignore[attr-defined]
        live=live,
        fingerprint=fingerprint(seen),
        operator_entries=[e for _, e in entries if e.kind == "operator_action"],
        finish=finish,
        deliveries=deliveries,
        findings=findings,
    )


def unknown_steps_of(*, tasks: QuerySet[Task]) -> list[int]:
    """The unknown steps of these tasks, for a bulk *Reconcile now*."""
    return list(
        Step.objects.filter(state=StepState.UNKNOWN, task__in=tasks.values("pk")).values_list(
            "pk", flat=True
        )
    )


def tasks_matching(*, state: str, q: str) -> QuerySet[Task]:
    rows = Task.objects.annotate(has_unknown=_unknown_steps())
    if state in FILTERS:
        rows = rows.filter(FILTERS[state][1])
    return rows.filter(_search(q))


def labels() -> Mapping[str, str]:
    return {name: label for name, (label, _) in FILTERS.items()}
