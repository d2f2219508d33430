"""What happened to steps: one log line per event (a step recorded and settled at once:
one line), and the counters and histograms (agentops/telemetry/instruments.py).

The journal's core writes no log and knows no metrics library. Its moves return what they
committed, and the runner notes what happened to steps from those rows (journal/events.py);
this turns the events into lines and counts, from the three places that commit steps:

- a run on a worker (:func:`run_observed`): the events its moves returned
  (``journal.run.Advance.events``), nothing read back;
- a provider's notification (:func:`report_observed`, from agentops.effects' ``step_settle``
  and ``step_conflict``), once its transaction has committed; and the notification itself,
  whatever became of it (:func:`event_observed`, agentops.effects' ``provider_event_observed``);
- a person's decision about a step, applied by a worker (:func:`settled_observed`,
  agentops.decisions).

A run killed before it returns (SIGKILL) is not told: its steps are in the journal, and the
gauges (agentops/telemetry/collector.py) count what it left open, but these counters miss
what it did. They count what processes saw; the gauges are the truth.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import replace
from uuid import UUID

from django.db import transaction
from django.db.models import Min

from agentops.telemetry import instruments as m
from journal.events import StepEvent
from journal.models import Entry, EntryKind, Step
from journal.outcomes import SETTLED_STATES

log = logging.getLogger("agentops.steps")


def _sentence(event: StepEvent, *, recorded: bool = False) -> str:
    who = f"step {event.step_key} {event.tool}"
    if recorded:  # a settlement whose record is told with it
        took = f" after {event.seconds:.3f} s" if event.seconds is not None else ""
        return f"{who}: recorded, attempt 1 settled {event.state}{took}"
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
    """Log each event (one line, with its step's fields) and count it. A step recorded and
    settled by its first attempt, one event after the other (the usual step), is one line:
    the settlement's, which says it was recorded too (``"recorded": true``)."""
    told = _unknown_for(list(events))
    for i, event in enumerate(told):
        level = logging.WARNING if event.what == "unknown" else logging.INFO
        if log.isEnabledFor(level):  # the sentence and its fields only for a line written
            if _told_with_next(event, told[i + 1 : i + 2]):
                pass  # the next line says it
            elif i and _told_with_next(told[i - 1], (event,)):
                log.log(
                    level,
                    _sentence(event, recorded=True),
                    extra={**event.fields(), "recorded": True},
                )
            else:
                log.log(level, _sentence(event), extra=event.fields())
        _count(event)


def _told_with_next(event: StepEvent, after: Sequence[StepEvent]) -> bool:
    """``event`` is a step's record, and ``after`` its settlement by its first attempt."""
    if event.what != "recorded" or not after:
        return False
    settled = after[0]
    return (
        settled.what == "settled"
        and settled.step_id == event.step_id
        and settled.via == "attempt"
        and settled.attempt == 1
    )


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


def _unknown_for(events: Sequence[StepEvent]) -> list[StepEvent]:
    """``events``, each settlement of a step that may have been unknown before
    (``maybe_unknown``) told how long it was: from its first ``unknown`` entry to when it
    settled, in one query for them all (none when no step of them may have been)."""
    asked = [e for e in events if e.what == "settled" and e.maybe_unknown and e.step_id]
    if not asked:
        return list(events)
    rows = (
        Entry.objects.filter(
            task_id__in={e.task_id for e in asked},
            step_id__in={e.step_id for e in asked},
            kind=EntryKind.STEP_SETTLED,
            data__state="unknown",
        )
        .values("step_id", "step__settled_at")
        .annotate(first_at=Min("at"))
    )
    since = {
        r["step_id"]: (r["step__settled_at"] - r["first_at"]).total_seconds()
        for r in rows
        if r["step__settled_at"] is not None
    }
    return [
        replace(e, unknown_for=max(0.0, since[e.step_id]))
        if e in asked and e.step_id in since
        else e
        for e in events
    ]


def run_observed(*, task_id: UUID, stopped: str, events: Sequence[StepEvent] = ()) -> None:
    """After a run has returned (everything it wrote is committed): count it, and log and
    count what its moves said they did to its steps. Never raises: telemetry must not fail
    a run."""
    m.RUNS.labels(stopped=stopped).inc()
    try:
        record(events)
    except Exception:  # a metrics failure is logged, never the run's
        log.exception("task %s: what the run did could not be told", task_id)


def settled_observed(*, step_id: int) -> None:
    """Once the current transaction commits: log and count the settlement of this step that
    a person or a provider's notification just made."""
    transaction.on_commit(lambda: _settled_now(step_id))


def _settled_now(step_id: int) -> None:
    try:
        step = (
            Step.objects.filter(pk=step_id)
            .values_list("task_id", "key", "tool", "offsets_id", "state")
            .first()
        )
        if step is None or step[4] not in SETTLED_STATES:
            return
        task_id, key, tool, offsets, state = step
        via = (
            Entry.objects.filter(task_id=task_id, step_id=step_id, kind=EntryKind.STEP_SETTLED)
            .exclude(data__state="unknown")
            .order_by("-id")
            .values_list("data__via", flat=True)
            .first()
        )
        event = StepEvent(
            "settled",
            task_id=task_id,
            step_key=key,
            tool=tool,
            state=state,
            step_id=step_id,
            undo=offsets is not None,
            via=str(via or ""),
            maybe_unknown=True,
        )
        record([event])
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
