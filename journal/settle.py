"""Changing a step's state: starting an attempt, settling it, marking it unknown.

Settling to ``done`` or ``not_done`` is ``journal_settle`` (journal/sql), the one move by which
a provider's report settles a step: monotone, and with no lease needed — the runner, a lookup
and a provider's notification may all report the same effect, in any order, and only the
first report changes anything; one that contradicts a settled step is a conflict, recorded
by the same statement. Marking ``unknown`` and starting attempts belong to the lease holder.

Every one of these takes the task's row lock first (the lease check does, under a lease), so
it judges the task's status after any concurrent change of it has committed: a notification
that settles a step while its runner marks the task waiting wakes it, never strands it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from journal.calls import call
from journal.events import StepEvent, held_event, step_event
from journal.leases import Lease, hold_back, lease_call
from journal.models import Attention, Step
from journal.outcomes import SETTLED_STATES, Outcome, StepState


class StepAlreadySettled(Exception):
    """The step settled meanwhile (a notification beat the runner); there is nothing to
    retry."""


def step_attempt_start(
    *,
    lease: Lease,
    step: Step,
    lookup: Mapping[str, Any] | None = None,
    told: Sequence[StepEvent] = (),
) -> int:
    """Commit the start of another attempt of ``step`` (same key, same arguments).

    This is one reconciliation round of the step. ``lookup``, when given, is the lookup
    that preceded this retry, noted in the same commit (``told`` tells it, on the lease's
    events). Returns the attempt's number.
    """
    row = lease_call(
        lease,
        "journal_attempt_start",
        step=step.pk,
        lookup=dict(lookup) if lookup is not None else None,
    )
    if row.attempt is None:
        raise StepAlreadySettled(step.key)
    step.attempts = int(row.attempt)
    step.lookups += 1
    step.state = StepState.PENDING
    lease.events.extend(told)
    lease.events.append(step_event("attempt_started", step, attempt=step.attempts))
    return step.attempts


def step_settle(
    *,
    step_id: int,
    outcome: Outcome,
    via: str,
    lease: Lease | None = None,
    notes: Sequence[Mapping[str, Any]] = (),
    actor: str = "",
    attempt: Mapping[str, Any] | None = None,
    lookup: bool = False,
    defer: bool = False,
    event: StepEvent | None = None,
    told: Sequence[StepEvent] = (),
) -> bool:
    """Settle a step ``done`` or ``not_done`` by what a provider said. Returns whether this
    call changed it.

    One statement, ``journal_settle``. A settled step never moves: a repeated report changes
    nothing; a contradicting one is recorded as a conflict and the task handed to a person.
    When the step settles, a task that was waiting for it can advance again; a ``done`` undo
    marks the step it undoes as undone (so its object's once-only effect may happen again).
    ``attempt`` are the facts of the attempt that ended so (written into the settlement's
    entry; when the step had settled already, as a note of their own); ``lookup`` says a
    lookup settled it (counted as a reconciliation round); ``notes`` are what was seen with
    it (journal.entries.note).

    ``defer`` (the runner, for the attempt it just made) holds the settlement back on the
    lease instead (journal.leases.hold_back): the holder's next move writes it first, in the
    same statement. True is returned, as the step is the runner's to settle (a report that
    beat it is a conflict or a repeat, found when it is written).

    Under a lease, ``event`` is the settlement as the runner tells it and ``told`` what the
    notes written with it tell: they go on the lease's events once written (an attempt that
    found its step settled already only as the attempt that ended).
    """
    if outcome.state not in SETTLED_STATES:
        raise ValueError(f"step_settle takes done or not_done, not {outcome.state}")
    data = {"state": outcome.state, "via": via, "detail": outcome.detail, **dict(outcome.data)}
    entry = {**data, **dict(attempt or {})}
    if defer:
        if lease is None or notes or via != "attempt" or lookup or actor or event is None:
            raise ValueError(
                "only the runner's own attempt is settled later, under its lease, told by its event"
            )
        hold_back(
            lease,
            step_id=step_id,
            state=str(outcome.state),
            detail=outcome.detail,
            outcome=dict(outcome.data),
            entry=entry,
            event=event,
        )
        return True
    params: dict[str, Any] = {
        "step": step_id,
        "state": str(outcome.state),
        "detail": outcome.detail,
        "outcome": dict(outcome.data),
        "entry": entry,
        "via": via,
        "lookups": 1 if lookup else 0,
        "actor": actor,
        "notes": [dict(n) for n in notes] or None,
    }
    if lease is not None:
        row = lease_call(lease, "journal_settle", **params)
        lease.events.extend(told)
        if event is not None:
            settled = "settled" if row.changed else "repeat" if via == "attempt" else None
            noted = held_event(event, settled)
            if noted is not None:
                lease.events.append(noted)
    else:
        row = call("journal_settle", **params)
        if row is None:
            raise Step.DoesNotExist(f"no step {step_id}")
    return bool(row.changed)


def step_conflict(
    *,
    step: Step,
    reason: str,
    via: str,
    actor: str = "",
    notes: Sequence[Mapping[str, Any]] = (),
    **facts: Any,
) -> None:
    """Record that a report about ``step`` does not fit the step (another kind of event,
    another amount or object), beside ``notes`` of what was received, and hand its task to a
    person — whatever the task's status, ended ones included. The step keeps its state."""
    call(
        "journal_step_conflict",
        step=step.pk,
        reason=reason,
        via=via,
        actor=actor,
        facts=facts,
        notes=[dict(n) for n in notes] or None,
    )


def step_noted(*, step_id: int, notes: Sequence[Mapping[str, Any]]) -> None:
    """Note what a provider said about a step that settles nothing (an effect not final yet)."""
    call("journal_step_noted", step=step_id, notes=[dict(n) for n in notes])


def step_mark_unknown(
    *,
    lease: Lease,
    step: Step,
    outcome: Outcome,
    next_check_in: float | None,
    notes: Sequence[Mapping[str, Any]] = (),
    give_up: tuple[Attention, str] | None = None,
    count_round: bool = False,
    told: Sequence[StepEvent] = (),
) -> None:
    """Record that ``step`` may have happened, and what is being done to find out.

    With ``next_check_in`` the step is looked up again after that many seconds and the
    task waits until then; with ``None`` nothing more can be done automatically and the
    task needs a human (``give_up`` says why, as a code and a sentence). ``told`` is what
    ``notes`` tell (journal/events.py); the step's being unknown is told after them.
    """
    if outcome.state != StepState.UNKNOWN:
        raise ValueError("step_mark_unknown takes an unknown outcome")
    if next_check_in is None and give_up is None:
        raise ValueError("a step that will not be looked up again needs a reason to give up")
    code, why = give_up if give_up is not None else ("", "")
    row = lease_call(
        lease,
        "journal_mark_unknown",
        step=step.pk,
        detail=outcome.detail,
        outcome=dict(outcome.data),
        next_check_in=next_check_in,
        code=str(code),
        reason=why,
        count_round=count_round,
        notes=[dict(n) for n in notes] or None,
    )
    lease.events.extend(told)
    if row.changed:
        step.state = StepState.UNKNOWN
        step.lookups += 1 if count_round else 0
        lease.events.append(
            step_event(
                "unknown", step, detail=outcome.detail[:300], first_unknown=row.first_unknown
            )
        )
