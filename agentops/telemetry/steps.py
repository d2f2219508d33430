"""What happened to steps, read back from the journal once it is committed: one log line per
event, and the counters and histograms (agentops/telemetry/instruments.py).

The journal's core writes no log and knows no metrics library. Its entries are the record of
what happened, so this reads them after the fact, from the three places that commit steps:

- a run on a worker (:func:`run_observed`): the entries written under the run's lease
  (``journal.run.Advance`` carries its token and when it was taken), before the next
  lease; only the kinds the lease holder alone writes are taken, so a notification or a
  person's action that landed during the run is not counted twice;
- a provider's notification (:func:`report_observed`, from agentops.effects' ``step_settle``
  and ``step_conflict``), once its transaction has committed; and the notification itself,
  whatever became of it (:func:`event_observed`, agentops.effects' ``provider_event_observed``);
- a person settling a step by hand (:func:`settled_observed`, agentops.runner.step_resolve).

A run killed before it returns (SIGKILL, a lost database) is not read back: its steps are in
the journal, and the gauges (agentops/telemetry/collector.py) count what it left open, but
these counters miss what it did. They count what processes saw; the gauges are the truth.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import Min, Q

from agentops.telemetry import instruments as m
from journal.db import prepared_cursor
from journal.models import Entry, EntryKind, Step

log = logging.getLogger("agentops.steps")

# What only a task's lease holder writes (journal/record.py, perform.py, settle.py).
RUN_KINDS = (
    EntryKind.STEP_RECORDED,
    EntryKind.DECISION_REJECTED,
    EntryKind.DECISION_REFUSED,
    EntryKind.GUARD_REFUSED,
    EntryKind.ATTEMPT_STARTED,
    EntryKind.ATTEMPT_ENDED,
    EntryKind.LOOKUP,
    EntryKind.STEP_SETTLED,
)
REFUSED_KINDS = (EntryKind.DECISION_REJECTED, EntryKind.DECISION_REFUSED, EntryKind.GUARD_REFUSED)
# How a step settles under its runner's lease; the others ("operator", "webhook …") are
# read back where they happen.
RUN_VIAS = ("attempt", "lookup")
# A lookup's result as journal.perform writes it → the metric's label.
LOOKUP_RESULTS = {"done": "done", "not_done": "not_done", "not_found": "not_found"}


@dataclass(frozen=True)
class StepEvent:
    """One thing the journal says happened to a step."""

    what: str
    """``recorded``, ``refused``, ``attempt_started``, ``attempt_ended``, ``lookup``,
    ``settled`` (done or not done) or ``unknown``."""
    task_id: UUID
    step_key: str
    tool: str
    state: str
    """The step's state this event leaves it in (``pending`` while an attempt is out)."""
    undo: bool = False
    """The step is a compensation (it undoes another step of its saga)."""
    attempt: int | None = None
    via: str = ""
    code: str = ""
    """A refusal's code."""
    result: str = ""
    """A lookup's finding."""
    detail: str = ""
    seconds: float | None = None
    """An ended attempt's duration."""
    unknown_for: float | None = None
    """A settlement's time since the step was first unknown (None: it never was)."""
    first_unknown: bool = False
    """An ``unknown`` event that is the step's first."""

    def fields(self) -> dict[str, Any]:
        """The ``extra`` of its log line: every line about a step names these four."""
        facts: dict[str, Any] = {
            "task_id": str(self.task_id),
            "step_key": self.step_key,
            "tool": self.tool,
            "state": self.state,
            "event": self.what,
        }
        for name in ("attempt", "via", "code", "result"):
            value = getattr(self, name)
            if value not in (None, ""):
                facts[name] = value
        if self.seconds is not None:
            facts["seconds"] = round(self.seconds, 3)
        if self.unknown_for is not None:
            facts["unknown_seconds"] = round(self.unknown_for, 3)
        if self.undo:
            facts["undo"] = True
        return facts


def _sentence(event: StepEvent) -> str:
    who = f"step {event.step_key} {event.tool}"
    if event.what == "recorded":
        return f"{who}: recorded, attempt 1 started"
    if event.what == "refused":
        return f"{who}: refused ({event.code}), never sent: {event.detail}"
    if event.what == "attempt_started":
        return f"{who}: attempt {event.attempt} started, same key and arguments"
    if event.what == "attempt_ended":
        took = f" after {event.seconds:.3f} s" if event.seconds is not None else ""
        return f"{who}: attempt {event.attempt} ended {event.state}{took}"
    if event.what == "lookup":
        return f"{who}: looked up at the provider: {event.result}"
    if event.what == "unknown":
        return f"{who}: unknown: {event.detail}"
    unknown = f", {event.unknown_for:.1f} s after it was unknown" if event.unknown_for else ""
    return f"{who}: settled {event.state} by {event.via}{unknown}"


def record(events: Iterable[StepEvent]) -> None:
    """Log each event (one line, with its step's fields) and count it."""
    for event in events:
        level = logging.WARNING if event.what == "unknown" else logging.INFO
        if log.isEnabledFor(level):  # the sentence and its fields only for a line written
            log.log(level, _sentence(event), extra=event.fields())
        _count(event)


def _count(event: StepEvent) -> None:
    outcome = {"refused": "refused", "settled": event.state, "unknown": "unknown"}.get(event.what)
    if event.what == "unknown" and not event.first_unknown:
        outcome = None
    if outcome is not None:
        m.STEPS.labels(tool=event.tool, outcome=outcome).inc()
        if event.undo:
            m.COMPENSATIONS.labels(tool=event.tool, outcome=outcome).inc()
    if event.what == "refused":
        m.REFUSALS.labels(code=event.code).inc()
    elif event.what == "lookup":
        m.LOOKUPS.labels(tool=event.tool, result=event.result).inc()
    if event.seconds is not None:
        m.ATTEMPT_SECONDS.labels(tool=event.tool).observe(event.seconds)
    if event.what == "settled" and event.unknown_for is not None:
        m.UNKNOWN_SECONDS.labels(tool=event.tool).observe(event.unknown_for)


def _first_unknown(task_id: UUID, step_ids: Sequence[int]) -> dict[int, tuple[int, datetime]]:
    """Each step's first ``unknown`` entry (its id and when), for the steps that have one."""
    if not step_ids:
        return {}
    rows = (
        Entry.objects.filter(
            task_id=task_id,
            step_id__in=step_ids,
            kind=EntryKind.STEP_SETTLED,
            data__state="unknown",
        )
        .values("step_id")
        .annotate(first_id=Min("id"), first_at=Min("at"))
    )
    return {r["step_id"]: (r["first_id"], r["first_at"]) for r in rows}


@dataclass(frozen=True, slots=True)
class Seen:
    """An entry about a step, with what of its step the events tell: read as plain values,
    not as models (a run's read-back is one row per entry, and a model costs many times a
    tuple to build)."""

    pk: int
    kind: str
    at: datetime
    data: dict[str, Any]
    step_id: int
    key: str
    tool: str
    undo: bool
    refusal: str
    detail: str
    state: str
    attempts: int
    lookups: int


_SEEN_FIELDS = (
    "id",
    "kind",
    "at",
    "data",
    "step_id",
    "step__key",
    "step__tool",
    "step__offsets_id",
    "step__refusal",
    "step__detail",
    "step__state",
    "step__attempts",
    "step__lookups",
)


def _seen(entries: Any) -> list[Seen]:
    """``entries`` (a queryset of entries about steps) as :class:`Seen`, in its order."""
    return [
        Seen(pk, kind, at, data or {}, step, key, tool, offsets is not None, *rest)
        for pk, kind, at, data, step, key, tool, offsets, *rest in entries.values_list(
            *_SEEN_FIELDS
        )
    ]


def events_of(entries: Sequence[Seen], task_id: UUID) -> list[StepEvent]:
    """The events these entries (about steps, in commit order) tell. An attempt's duration
    is known when its start is among them: a run always writes both."""
    # A step settled at its first attempt without a lookup was never unknown: no need to
    # look for when it first was (the usual step costs no query here).
    settling = [
        e.step_id
        for e in entries
        if e.kind == EntryKind.STEP_SETTLED
        and (e.attempts > 1 or e.lookups > 0 or e.data.get("state") == "unknown")
    ]
    unknown_since = _first_unknown(task_id, sorted(set(settling)))
    starts: dict[tuple[int, int], datetime] = {}
    events: list[StepEvent] = []
    for e in entries:
        data = e.data
        base: dict[str, Any] = {
            "task_id": task_id,
            "step_key": e.key,
            "tool": e.tool,
            "undo": e.undo,
        }
        attempt = data.get("attempt")
        if e.kind in REFUSED_KINDS:
            events.append(
                StepEvent(
                    "refused",
                    **base,
                    state="not_done",
                    code=str(data.get("refusal") or e.refusal),
                    detail=str(data.get("proof") or e.detail)[:300],
                )
            )
        elif e.kind in (EntryKind.STEP_RECORDED, EntryKind.ATTEMPT_STARTED):
            starts[(e.step_id, int(attempt or 1))] = e.at
            what = "recorded" if e.kind == EntryKind.STEP_RECORDED else "attempt_started"
            events.append(StepEvent(what, **base, state="pending", attempt=int(attempt or 1)))
        elif e.kind == EntryKind.ATTEMPT_ENDED:
            events.append(
                StepEvent(
                    "attempt_ended",
                    **base,
                    state=str(data.get("classified", "")),
                    attempt=attempt,
                    seconds=_took(starts, e.step_id, attempt, e.at),
                )
            )
        elif e.kind == EntryKind.LOOKUP:
            result = LOOKUP_RESULTS.get(str(data.get("result")), "failed")
            events.append(StepEvent("lookup", **base, state=e.state, result=result))
        elif e.kind == EntryKind.STEP_SETTLED:
            state = str(data.get("state", ""))
            first = unknown_since.get(e.step_id)
            if state == "unknown":
                events.append(
                    StepEvent(
                        "unknown",
                        **base,
                        state=state,
                        detail=str(data.get("detail", ""))[:300],
                        first_unknown=first is not None and first[0] == e.pk,
                    )
                )
                continue
            since = first[1] if first is not None and first[0] < e.pk else None
            events.append(
                StepEvent(
                    "settled",
                    **base,
                    state=state,
                    via=str(data.get("via", "")),
                    attempt=attempt,
                    # An attempt that settled its step ended in this entry.
                    seconds=_took(starts, e.step_id, attempt, e.at) if attempt else None,
                    unknown_for=(e.at - since).total_seconds() if since is not None else None,
                )
            )
    return events


def _took(
    starts: dict[tuple[int, int], datetime], step_id: int, attempt: Any, at: datetime
) -> float | None:
    started = starts.get((step_id, int(attempt))) if isinstance(attempt, int) else None
    return None if started is None else max(0.0, (at - started).total_seconds())


# The step entries a run wrote: as one statement prepared once per session (journal.db), as
# the journal's own are, since planning one on the partitioned tables costs more than running
# it (docs/design.md §17). The kinds are constants, written into its text: a list passed as a
# parameter is looked through for its elements' type at every call.
RUN_ENTRIES = """
SELECT e.id, e.kind, e.at, e.data, e.step_id, s.key, s.tool, s.offsets_id IS NOT NULL,
       s.refusal, s.detail, s.state, s.attempts, s.lookups
  FROM journal_entry e JOIN journal_step s ON s.id = e.step_id AND s.task_id = e.task_id
 WHERE e.task_id = %s AND e.at >= %s AND e.kind = ANY('{KINDS}'::text[])
   AND e.at < COALESCE((SELECT t.lease_taken_at FROM journal_task t
                         WHERE t.id = %s AND t.lease_token > %s), 'infinity')
 ORDER BY e.id
""".replace("KINDS", ",".join(str(kind) for kind in RUN_KINDS))


def run_entries(*, task_id: UUID, token: int, since: datetime) -> list[Seen]:
    """The step entries a run wrote under lease ``token``, taken at ``since``: those only a
    lease holder writes, from then until the task's next lease was taken (if it was)."""
    with prepared_cursor() as cursor:
        cursor.execute(RUN_ENTRIES, [task_id, since, task_id, token])
        rows = cursor.fetchall()
    # jsonb comes back as text on Django's connections (its JSONField decodes it).
    seen = [
        Seen(pk, kind, at, json.loads(data) if data else {}, *rest)
        for pk, kind, at, data, *rest in rows
    ]
    return [
        e
        for e in seen
        if e.kind != EntryKind.STEP_SETTLED
        or e.data.get("state") == "unknown"
        or e.data.get("via") in RUN_VIAS
    ]


def run_observed(*, task_id: UUID, stopped: str, token: int, since: datetime | None) -> None:
    """After a run has returned (everything it wrote is committed): count it, and read back,
    log and count what it did to its steps. Never raises: telemetry must not fail a run."""
    m.RUNS.labels(stopped=stopped).inc()
    if not token or since is None:
        return
    try:
        entries = run_entries(task_id=task_id, token=token, since=since)
        record(events_of(entries, task_id))
    except Exception:  # a metrics failure is logged, never the run's
        log.exception("task %s: what the run did could not be read back", task_id)


def settled_observed(*, step_id: int) -> None:
    """Once the current transaction commits: log and count the settlement of this step that
    a person or a provider's notification just made."""
    transaction.on_commit(lambda: _settled_now(step_id))


def _settled_now(step_id: int) -> None:
    try:
        task_id = Step.objects.filter(pk=step_id).values_list("task_id", flat=True).first()
        if task_id is None:
            return
        last = _seen(
            Entry.objects.filter(task_id=task_id, step_id=step_id, kind=EntryKind.STEP_SETTLED)
            .filter(~Q(data__state="unknown"))
            .order_by("-id")[:1]
        )
        if last:
            record(events_of(last, task_id))
    except Exception:
        log.exception("step %s: its settlement could not be read back", step_id)


def report_observed(*, step_id: int, provider: str, reported: str, changed: bool) -> None:
    """A provider's report about a step (``reported``: done or not_done, or ``conflict`` for
    one that does not match the step): once committed, count it as applied, unchanged or
    conflict, and read back a settlement it made."""

    def observe() -> None:
        try:
            if reported == "conflict":
                outcome = "conflict"
            elif changed:
                outcome = "applied"
            else:
                state = Step.objects.filter(pk=step_id).values_list("state", flat=True).first()
                outcome = "unchanged" if state == reported else "conflict"
            m.WEBHOOK_REPORTS.labels(provider=provider or "unknown", outcome=outcome).inc()
        except Exception:
            log.exception("step %s: a provider's report could not be counted", step_id)

    transaction.on_commit(observe)
    if changed:
        settled_observed(step_id=step_id)


EVENT_OUTCOMES = (
    "applied",
    "unchanged",
    "conflict",
    "ignored",
    "duplicate",
    "refused",
    "failed",
)


def event_observed(*, provider: str, outcome: str) -> None:
    """Count one provider notification (a webhook delivery) by what became of it (one of
    :data:`EVENT_OUTCOMES`), once the current transaction commits: an event whose
    transaction is rolled back was not kept, so it is counted as the ``failed`` its caller
    says it was, not as what it would have done. Outside a transaction, at once."""
    if outcome not in EVENT_OUTCOMES:
        raise ValueError(f"a provider event's outcome is one of {EVENT_OUTCOMES}, not {outcome!r}")

    def count() -> None:
        m.WEBHOOK_EVENTS.labels(provider=provider or "unknown", outcome=outcome).inc()

    transaction.on_commit(count)
