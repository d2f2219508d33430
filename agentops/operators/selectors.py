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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import (
    Case,
    Count,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    TextField,
    Value,
    When,
)
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce, Lower, Now
from django.utils import timezone
from django.utils.safestring import SafeString

from agentops.audit.models import Finding, FindingKind
from agentops.audit.selectors import findings_of
from agentops.kinds import kinds, references_of, tool_registry
from agentops.models import CoordinationKind, TaskClaim, TaskCoordination
from agentops.notifications.models import Delivery
from agentops.notifications.selectors import deliveries_of
from agentops.operators import readable
from agentops.operators.claims import Hold, coordination_of, hold_of
from agentops.operators.deadlines import Deadlines, deadlines_of
from agentops.operators.history import Decision, History, task_history
from agentops.operators.story import Happening, task_story
from agentops.operators.timeline import Event, Timeline, step_timeline
from agentops.operators.waits import (
    WaitingFor,
    waiting_for_annotation,
    waiting_for_of,
    waits_on_person,
)
from journal.models import (
    Approval,
    ApprovalState,
    Attention,
    Entry,
    EntryKind,
    Step,
    StepKind,
    Task,
    TaskStatus,
)
from journal.operator import correction_of
from journal.outcomes import StepState
from journal.protocols import StepFact
from journal.selectors import task_facts_of
from journal.status import ADVANCING

PER_PAGE = 25


def _unknown_steps() -> Exists:
    return Exists(Step.objects.filter(task=OuterRef("pk"), state=StepState.UNKNOWN))


# The list's filters: name → (label, condition). Kept in the URL as ?state=…
FILTERS: dict[str, tuple[str, Q]] = {
    # A task waiting on another's effect that went to a person needs one too (issue 38).
    "attention": (
        "needs attention",
        Q(status=TaskStatus.NEEDS_HUMAN) | Q(waits_on_person=True),
    ),
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
    counts = Task.objects.annotate(waits_on_person=waits_on_person()).aggregate(
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


# A search this long or longer also finds the text inside the references' texts (a name, an
# address); shorter, only whole values (a reference, an id).
SUBSTRING_FROM = 3


def _search(q: str) -> Q:
    """Tasks matching a business reference, a step key, a provider's id or a task id, or a
    customer's name or address (any text of the references: ``Lovelace`` finds "Ada
    Lovelace", ``ada@example.com`` finds the task that emails it); any text at all (a search
    that cannot be in the journal matches nothing)."""
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
    top, nested = _text_fields()
    for name in top:
        lookup = "icontains" if len(q) >= SUBSTRING_FROM else "iexact"
        by_refs |= Q(**{f"refs__{name}__{lookup}": q})
    for path in nested:
        by_refs |= _reference_q(path.split("."), q)
    return by_refs | Q(pk__in=Step.objects.filter(by_evidence).values("task_id"))


def _text_fields() -> tuple[list[str], list[str]]:
    """The references' free texts, as the kinds' schemas declare them: top-level ones
    (``email``, ``traveller``) and those in lists of objects (``invoices.*.email``). Not
    enumerations (a currency): those are filters, not what a person types."""
    top: set[str] = set()
    nested: set[str] = set()
    references = {p for kind in kinds().values() for p in kind.references}
    for kind in kinds().values():
        for name, spec in (kind.refs_schema.get("properties") or {}).items():
            if _is_text(spec) and name not in references:  # a reference is found whole
                top.add(name)
            items = (spec.get("items") or {}) if spec.get("type") == "array" else {}
            for inner, inner_spec in (items.get("properties") or {}).items():
                if _is_text(inner_spec):
                    nested.add(f"{name}.*.{inner}")
    return sorted(top), sorted(nested - references)


def _is_text(spec: Mapping[str, Any]) -> bool:
    return spec.get("type") == "string" and "enum" not in spec


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
class ListQuery:
    """What an operator asked the list for (parsed by the view's form; kept in the URL)."""

    state: str = ""
    q: str = ""
    kind: str = ""
    attention: str = ""
    since: date | None = None
    until: date | None = None
    sort: str = ""


SORTS: dict[str, str] = {
    "": "newest first",
    "oldest": "oldest first",
    "stuck": "stuck longest first",
    "amount": "largest amount first",
    "customer": "customer, A to Z",
    "ended": "ended most recently first",
    "duration": "longest running first",
}
# How a task ended, in the journal: compensated is a task_finished entry too.
END_KINDS = (EntryKind.TASK_FINISHED, EntryKind.TASK_CANCELLED)
# A task's amount, when its refs hold one as a number (minor units); other tasks sort last.
AMOUNT_SQL = (
    "CASE WHEN jsonb_typeof(journal_task.refs -> 'amount') = 'number' "
    "THEN (journal_task.refs ->> 'amount')::numeric END"
)
# What holds a task up for a person: those come first in the "stuck longest" order.
STUCK = (
    Q(status__in=[TaskStatus.NEEDS_HUMAN, TaskStatus.AWAITING_APPROVAL])
    | Q(has_unknown=True)
    | Q(waits_on_person=True)
)
# The entries that say since when a task has been where it is.
SINCE_KINDS = (EntryKind.TASK_FLAGGED, EntryKind.APPROVAL_REQUESTED, EntryKind.TASK_WAITING)


@dataclass(frozen=True)
class TaskList:
    page: Page[Task]
    attention: list[Task]
    counts: dict[str, int]
    state: str
    q: str
    in_flight: bool
    fingerprint: str
    query: ListQuery = field(default_factory=ListQuery)


def _rows(query: ListQuery) -> QuerySet[Task]:
    since = (
        Entry.objects.filter(task=OuterRef("pk"), kind__in=SINCE_KINDS)
        .order_by("-id")
        .values("at")[:1]
    )
    ended = (
        Entry.objects.filter(task=OuterRef("pk"), kind__in=END_KINDS)
        .order_by("-id")
        .values("at")[:1]
    )
    held = TaskClaim.objects.filter(task_id=OuterRef("pk")).exclude(holder="")
    rows: QuerySet[Task] = Task.objects.annotate(
        has_unknown=_unknown_steps(),
        # What it waits for, when the guard refused it for another task's effect, and
        # whether that task is with a person (agentops/operators/waits.py).
        waiting_for=waiting_for_annotation(),
        waits_on_person=waits_on_person(),
        # Who holds it (agentops/operators/claims.py), in the same query as the row.
        holder=Subquery(held.values("holder")[:1]),
        held_since=Subquery(held.values("claimed_at")[:1]),
        running_now=Q(lease_expires_at__gt=Now()),
        stuck_since=Subquery(since),
        ended_at=Case(When(ended_as="", then=Value(None)), default=Subquery(ended)),
    )
    if query.state in FILTERS:
        rows = rows.filter(FILTERS[query.state][1])
    if query.kind:
        rows = rows.filter(kind=query.kind)
    if query.attention:
        rows = rows.filter(attention_code=query.attention)
    if query.since is not None:
        rows = rows.filter(created_at__gte=_midnight(query.since))
    if query.until is not None:
        rows = rows.filter(created_at__lt=_midnight(query.until) + timedelta(days=1))
    return rows.filter(_search(query.q))


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def task_list(*, query: ListQuery | None = None, page: int | str = 1) -> TaskList:
    """The tasks an operator asked for, newest first (or oldest, or those stuck longest
    first); those needing a person come first on the page, in their own panel."""
    query = query or ListQuery()
    rows = _rows(query)
    if query.sort == "oldest":
        rows = rows.order_by("created_at", "pk")
    elif query.sort == "stuck":
        rows = rows.annotate(
            stuck=Case(When(STUCK, then=Value(0)), default=Value(1), output_field=IntegerField())
        ).order_by("stuck", F("stuck_since").asc(nulls_last=True), "created_at", "pk")
    elif query.sort == "amount":
        rows = rows.annotate(amount_minor=RawSQL(AMOUNT_SQL, ())).order_by(  # noqa: S611 - constant
            F("amount_minor").desc(nulls_last=True), "-created_at", "-pk"
        )
    elif query.sort == "customer":
        rows = rows.annotate(customer=_customer_sql()).order_by(
            F("customer").asc(nulls_last=True), "-created_at", "-pk"
        )
    elif query.sort == "ended":
        rows = rows.order_by(F("ended_at").desc(nulls_last=True), "-created_at", "-pk")
    elif query.sort == "duration":
        rows = rows.annotate(
            took=ExpressionWrapper(
                Coalesce(F("ended_at"), Now()) - F("created_at"), output_field=DurationField()
            )
        ).order_by(F("took").desc(), "-created_at", "-pk")
    else:
        rows = rows.order_by("-created_at", "-pk")
    paged = Paginator(rows, PER_PAGE).get_page(page)
    attention: list[Task] = []
    if query == ListQuery():
        attention = list(
            Task.objects.annotate(
                waiting_for=waiting_for_annotation(), waits_on_person=waits_on_person()
            )
            .filter(
                Q(status__in=[TaskStatus.NEEDS_HUMAN, TaskStatus.AWAITING_APPROVAL])
                | Q(waits_on_person=True)
            )
            .order_by("-created_at")[:10]
        )
    counts = task_counts()
    listed = list(paged.object_list)
    _attach_deadlines(listed)
    for t in [*listed, *attention]:
        t.waits = WaitingFor.of(t.waiting_for)  # type: ignore[attr-defined]
    in_flight = any(t.status in ADVANCING for t in listed) or counts["running"] > 0
    seen: list[tuple[Any, ...]] = [
        (
            str(t.pk),
            t.status,
            t.attention_code,
            t.step_count,
            t.has_unknown,  # type: ignore[attr-defined]
            t.running_now,  # type: ignore[attr-defined]
            t.holder,  # type: ignore[attr-defined]
            t.waiting_for,  # type: ignore[attr-defined]
        )
        for t in listed
    ]
    seen += [(str(t.pk), t.status, t.waiting_for) for t in attention]  # type: ignore[attr-defined]
    return TaskList(
        page=paged,
        attention=attention,
        counts=counts,
        state=query.state if query.state in FILTERS else "",
        q=query.q,
        in_flight=in_flight,
        fingerprint=fingerprint(seen, counts, paged.number, paged.paginator.count),
        query=query,
    )


def _customer_sql() -> Case:
    """Who each task is for, as the list sorts it: the first of its kind's ``customer`` paths
    its refs name (the first row of a list), lower-cased."""
    whens = []
    for name, kind in sorted(kinds().items()):
        paths = [KT("refs__" + "__".join(p.replace("*", "0").split("."))) for p in kind.customer]
        if paths:
            found = Coalesce(*paths, output_field=TextField()) if len(paths) > 1 else paths[0]
            whens.append(When(kind=name, then=Lower(found)))
    return Case(*whens, default=Value(None), output_field=TextField())


def _attach_deadlines(listed: list[Task]) -> None:
    """Each held task's first deadline (``deadline``) and whether to warn (``deadline_warn``):
    two queries for any non-empty page, whatever it shows (the approvals pending among its
    tasks, and the done steps of those tasks)."""
    ids = [t.pk for t in listed]
    pending = Approval.objects.filter(task_id=OuterRef("task_id"), state=ApprovalState.PENDING)
    held = {
        a.task_id: a for a in Approval.objects.filter(task_id__in=ids, state=ApprovalState.PENDING)
    }
    steps: dict[uuid.UUID, list[Step]] = defaultdict(list)
    if ids:
        for s in (
            Step.objects.filter(task_id__in=ids, state=StepState.DONE)
            .filter(Exists(pending))
            .only("task_id", "n", "kind", "tool", "state", "outcome", "offset_by_id", "offsets_id")
        ):
            steps[s.task_id].append(s)
    now = timezone.now()
    for t in listed:
        found = deadlines_of(held.get(t.pk), steps.get(t.pk, []), now)
        t.deadline = found.first  # type: ignore[attr-defined]
        t.deadline_warn = found.warning  # type: ignore[attr-defined]


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
    decisions: list[Decision] = field(default_factory=list)
    """People's decisions about this step (reconciled, settled by hand, approved, corrected)."""
    corrects: int | None = None
    """The step this one corrects (a person's correction of a late effect)."""
    corrected_by: int | None = None
    reported: Mapping[str, Any] | None = None
    """What the last conflicting report said was done (its evidence), if one did."""
    undo: str = ""
    """Whether a done effect was undone since, in words: ``undone`` (its undo step done),
    ``undo in flight``/``undo unknown`` (one recorded, not settled done), ``undone at the
    provider`` (the audit found it undone there, with no undo step)."""
    undo_tool: str = ""
    """The tool of the undo step, when there is one (``refund_charge``)."""

    @property
    def badge_text(self) -> str:
        """``done · undone``: the state, and what became of the effect since."""
        if self.step.state == StepState.DONE and self.undo:
            return f"done · {self.undo}"
        return self.badge

    @property
    def svg(self) -> SafeString:
        return self.timeline.svg(label=f"timeline of step {self.step.n}")


@dataclass(frozen=True)
class AttentionNow:
    """The step a task was handed to a person about, as it is now: a banner about an open
    step says so once that step settled (a webhook, a lookup, a person)."""

    n: int
    state: str
    settled_since: bool
    detail: str = ""
    at: datetime | None = None


@dataclass(frozen=True)
class TaskPage:
    task: Task
    rows: list[StepRow]
    held: Approval | None
    approvals: list[Approval]
    running_now: bool
    live: bool
    fingerprint: str
    finish: Step | None = None
    deliveries: list[Delivery] = field(default_factory=list)
    """What NOTIFY_URL was told of this task (agentops/notifications)."""
    findings: list[Finding] = field(default_factory=list)
    """What the provider audit found of this task's effects (agentops/audit)."""
    history: History = field(default_factory=History)
    attention: AttentionNow | None = None
    deadlines: Deadlines = field(default_factory=Deadlines)
    story: list[Happening] = field(default_factory=list)
    """Everything that happened to the task, oldest first, in plain words."""
    hold: Hold | None = None
    """Who holds the task now, and since when (agentops/operators/claims.py)."""
    coordination: list[TaskCoordination] = field(default_factory=list)
    """Its claims, releases, take-overs and notes, oldest first."""
    waiting_for: WaitingFor | None = None
    """Another task's effect on the same object its last step was refused for, while that
    is in flight or unknown (agentops/operators/waits.py)."""
    """A held step's: its approval's expiry and when the effects it builds on lapse."""

    @property
    def notes(self) -> list[TaskCoordination]:
        """The notes left on the task, newest last."""
        return [c for c in self.coordination if c.kind == CoordinationKind.NOTED]

    @property
    def steps(self) -> list[Step]:
        """Every step of the task, the finish included (for the journal's rules)."""
        return [r.step for r in self.rows] + ([self.finish] if self.finish else [])

    @property
    def amount(self) -> str:
        """What the task moves, as people read it: from its refs, or its first call that
        names an amount and a currency (a kind's default currency is in its arguments)."""
        shown = readable.money_of(self.task.refs)
        calls = [r.step.args for r in self.rows] + ([self.held.args] if self.held else [])
        return shown or next((m for m in map(readable.money_of, calls) if m), "")

    @property
    def reference(self) -> str:
        found = references_of(
            self.task.kind, self.task.refs if isinstance(self.task.refs, dict) else {}
        )
        return found[0] if found else ""


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
    """Everything a task's page shows, in a fixed number of queries (the task, its steps, its
    entries, its approvals, its notifications, its findings, who holds it and what operators
    did to coordinate on it)."""
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
    history = task_history(entries, n_of=n_of, approvals=approvals)
    corrects = {s.n: of for s in steps if (of := correction_of(s)) is not None}
    undos = {s.offsets_id: s for s in steps if s.offsets_id is not None}
    findings = findings_of(task_id=task_id)
    undone_there = {f.step_id for f in findings if f.kind == FindingKind.OFFSET_UNKNOWN}
    corrected_by = {of: n for n, of in corrects.items()}
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
        events = by_step.get(s.pk, [])
        rows.append(
            StepRow(
                step=s,
                fact=fact,
                badge=_badge(s),
                timeline=step_timeline(events, sent=s.n not in corrects),
                undone_by=n_of.get(s.offset_by_id) if s.offset_by_id else None,
                key_left_s=left,
                result_text=fact.result_text() if fact is not None else "",
                decisions=list(history.by_step.get(s.n, [])),
                corrects=corrects.get(s.n),
                corrected_by=corrected_by.get(s.n),
                reported=_reported(events),
                undo=_undo_words(s, undos.get(s.pk), undone_there),
                undo_tool=undos[s.pk].tool if s.pk in undos else "",
            )
        )
    held = next((a for a in approvals if a.state == ApprovalState.PENDING), None)
    deliveries = deliveries_of(task_id=task_id)
    hold = hold_of(task_id=task_id)
    coordination = coordination_of(task_id=task_id)
    calls = [s for s in steps if s.kind != StepKind.FINISH]
    waiting = waiting_for_of(task, calls[-1] if calls else None)
    # A task with a person keeps polling too: a webhook or a colleague may settle its steps,
    # and its banner must say so. A notification still being tried keeps the page polling
    # after the task is over.
    live = task.status in (
        *ADVANCING,
        TaskStatus.AWAITING_APPROVAL,
        TaskStatus.NEEDS_HUMAN,
    ) or any(d.settled_at is None for d in deliveries)
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
        (hold.holder, hold.since) if hold else None,
        [c.pk for c in coordination],
        (waiting.task, waiting.state, waiting.task_status) if waiting else None,
    )
    return TaskPage(
        task=task,
        rows=rows,
        held=held,
        approvals=approvals,
        running_now=bool(task.running_now),  # type: ignore[attr-defined]
        live=live,
        fingerprint=fingerprint(seen),
        finish=finish,
        deliveries=deliveries,
        findings=findings,
        history=history,
        attention=_attention_now(task, entries, {s.pk: s for s in steps}),
        deadlines=deadlines_of(held, steps, now),
        story=task_story(
            entries,
            n_of=n_of,
            tool_of={s.n: s.tool for s in steps},
            corrected=set(corrects),
            deliveries=deliveries,
            findings=findings,
            coordination=coordination,
        ),
        hold=hold,
        coordination=coordination,
        waiting_for=waiting,
    )


def _undo_words(step: Step, undo: Step | None, undone_there: set[int | None]) -> str:
    """What became of a done effect since: undone by its undo step (or one on its way), or
    at the provider, as the audit found."""
    if step.state != StepState.DONE:
        return ""
    if step.offset_by_id is not None:
        return "undone"
    if undo is not None:
        return {
            StepState.PENDING: "undo in flight",
            StepState.UNKNOWN: "undo unknown",
            StepState.NOT_DONE: "",  # not undone: the undo did not happen
        }.get(StepState(undo.state), "undone")
    if step.pk in undone_there:
        return "undone at the provider"
    return ""


def _reported(events: list[Event]) -> Mapping[str, Any] | None:
    """The evidence of the last report that contradicted the step by saying it was done."""
    for e in reversed(events):
        evidence = e.data.get("evidence")
        if e.kind == "conflict" and e.data.get("reported") == "done" and isinstance(evidence, dict):
            return evidence
    return None


def _attention_now(
    task: Task, entries: Sequence[tuple[int | None, Event]], steps: Mapping[int, Step]
) -> AttentionNow | None:
    """The step the task was last handed to a person about, and whether it settled since."""
    if task.status != TaskStatus.NEEDS_HUMAN:
        return None
    flagged = next(
        ((step_id, e) for step_id, e in reversed(entries) if e.kind == "task_flagged"), None
    )
    if flagged is None or flagged[0] is None or flagged[0] not in steps:
        return None
    step = steps[flagged[0]]
    since = step.settled_at is not None and step.settled_at > flagged[1].at
    return AttentionNow(step.n, str(step.state), since, step.detail, step.settled_at)


def unknown_steps_of(*, tasks: QuerySet[Task]) -> list[int]:
    """The unknown steps of these tasks, for a bulk *Reconcile now*."""
    return list(
        Step.objects.filter(state=StepState.UNKNOWN, task__in=tasks.values("pk")).values_list(
            "pk", flat=True
        )
    )


def tasks_matching(
    *, query: ListQuery | None = None, state: str = "", q: str = ""
) -> QuerySet[Task]:
    """Every task the list shows for ``query`` (or just a state and a search), on any page:
    a bulk action's "all", the HTTP API's ``?ref=``."""
    return _rows(query if query is not None else ListQuery(state=state, q=q))


def labels() -> Mapping[str, str]:
    return {name: label for name, (label, _) in FILTERS.items()}


def attention_labels() -> Mapping[str, str]:
    return dict(Attention.choices)
