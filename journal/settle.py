"""Changing a step's state: starting an attempt, settling it, marking it unknown.

Settling to ``done`` or ``not_done`` is ``journal_settle`` (journal/sql), the one place a
step settles: monotone, and with no lease needed — the runner, a lookup and a provider's
webhook may all report the same effect, in any order, and only the first report changes
anything. Marking ``unknown`` and starting attempts belong to the lease holder.

Every change here takes the task's row lock first (the fence does, under a lease), so it
judges the task's status after any concurrent change of it has committed: a webhook that
settles a step while its runner marks the task waiting wakes it, never strands it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from datetime import timedelta
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Now

from journal.db import prepared_cursor
from journal.entries import entries_add, entries_json, entry
from journal.leases import Deferred, Lease, LeaseLost, deferred_write, fence, lease_seconds
from journal.models import Attention, Entry, EntryKind, Step, TaskStatus
from journal.outcomes import LIVE_STATES, SETTLED_STATES, Outcome, StepState
from journal.status import task_flag, task_transition


class StepAlreadySettled(Exception):
    """The step settled meanwhile (a webhook beat the runner); there is nothing to retry."""


def step_attempt_start(*, lease: Lease, step: Step, lookup: dict[str, Any] | None = None) -> int:
    """Commit the start of another attempt of ``step`` (same key, same arguments).

    This is one reconciliation round of the step. ``lookup``, when given, is the lookup
    that preceded this retry, logged in the same commit. Returns the attempt's number.
    """
    with transaction.atomic():
        fence(lease)
        attempt = step.attempts + 1
        updated = Step.objects.filter(pk=step.pk, state__in=LIVE_STATES).update(
            state=StepState.PENDING,
            attempts=attempt,
            lookups=F("lookups") + 1,
            next_check_at=None,
        )
        if not updated:
            raise StepAlreadySettled(step.key)
        started = entry(
            kind=EntryKind.ATTEMPT_STARTED,
            task_id=step.task_id,
            step_id=step.pk,
            attempt=attempt,
            key=step.key,
        )
        if lookup is not None:
            looked = entry(kind=EntryKind.LOOKUP, task_id=step.task_id, step_id=step.pk, **lookup)
            entries_add(looked, started)
        else:
            entries_add(started)
    step.attempts = attempt
    step.lookups += 1
    step.state = StepState.PENDING
    return attempt


# journal_settle (journal/sql): the one place a step settles.
SETTLE = (
    "SELECT * FROM journal_settle(p_step => %(step)s::bigint, p_state => %(state)s::text, "
    "p_detail => %(detail)s::text, p_outcome => %(outcome)s::jsonb, p_entry => %(entry)s::jsonb, "
    "p_via => %(via)s::text, p_task => %(task)s::uuid, p_token => %(token)s::bigint, "
    "p_lease => %(lease)s::float8, p_lookups => %(lookups)s::integer, "
    "p_actor => %(actor)s::text, p_extra => %(extra)s::jsonb)"
)


def step_settle(
    *,
    step_id: int,
    outcome: Outcome,
    via: str,
    lease: Lease | None = None,
    extra: Sequence[Entry] = (),
    actor: str = "",
    attempt: Mapping[str, Any] | None = None,
    lookup: bool = False,
    defer: bool = False,
) -> bool:
    """Settle a step ``done`` or ``not_done``. Returns whether this call changed it.

    One statement, ``journal_settle``. A settled step never moves: a repeated report changes
    nothing; a contradicting one is logged as a conflict and the task is flagged for a
    human. When the step settles, a task that was waiting for it can advance again; a
    ``done`` undo marks the step it undoes as offset (so its object's once-only effect may
    happen again). ``attempt`` are the facts of the attempt that ended so (written into the
    settlement's entry; when the step had settled already, as an entry of their own);
    ``lookup`` says a lookup settled it (counted as a reconciliation round).

    ``defer`` (the runner, for the attempt it just made) holds the settlement back on the
    lease instead (:class:`~journal.leases.Deferred`): it is written with the next step's
    record in one commit, or before anything else the holder writes or reads; True is
    returned, as the step is the runner's to settle (a report that beat it is a conflict or
    a repeat, found when it is written).
    """
    if lease is not None and not defer:
        deferred_write(lease)  # the holder's earlier settlement first
    if outcome.state not in SETTLED_STATES:
        raise ValueError(f"step_settle takes done or not_done, not {outcome.state}")
    data = {"state": outcome.state, "via": via, "detail": outcome.detail, **dict(outcome.data)}
    settled_entry = {**data, **dict(attempt or {})}
    params = {
        "step": step_id,
        "state": str(outcome.state),
        "detail": outcome.detail,
        "outcome": json.dumps(dict(outcome.data), cls=DjangoJSONEncoder),
        "entry": json.dumps(settled_entry, cls=DjangoJSONEncoder),
        "via": via,
        "task": lease.task_id if lease is not None else None,
        "token": lease.token if lease is not None else None,
        "lease": lease_seconds(),
        "lookups": 1 if lookup else 0,
        "actor": actor,
        "extra": entries_json(extra),
    }
    if defer:
        if lease is None or extra or via != "attempt" or lookup or actor:
            raise ValueError("only the runner's own attempt is settled later, under its lease")
        held = lease

        def write() -> bool | None:
            return _settle(params, held)

        lease.deferred = Deferred(step_id=step_id, params=params, write=write)
        return True
    changed = _settle(params, lease)
    if changed is None:
        # Settled meanwhile (a webhook beat the runner): the attempt that ran is recorded,
        # and a contradiction is a conflict.
        return False
    return changed


def _settle(params: dict[str, Any], lease: Lease | None) -> bool | None:
    """Run journal_settle; True if it changed the step, None if the step had settled."""
    in_block = connection.in_atomic_block
    with transaction.atomic() if in_block else nullcontext():
        with prepared_cursor() as cursor:
            cursor.execute(SETTLE, params)
            row = cursor.fetchone()
        if row is None:
            if lease is not None:
                raise LeaseLost.of(lease)
            raise Step.DoesNotExist(f"no step {params['step']}")
        changed, version, _status, state, key, task_id = row
        if lease is not None:
            lease.versions.append(int(version))
        if changed:
            return True
        settled_otherwise(params, state=state, key=key, task_id=task_id)
    return None


def settled_otherwise(params: dict[str, Any], *, state: str, key: str, task_id: Any) -> None:
    """journal_settle changed nothing (``params`` were its arguments): the step had settled
    meanwhile, ``state``. The attempt that ran is recorded, and a contradiction is a conflict
    that hands the task to a person."""
    with transaction.atomic():
        attempt_facts = json.loads(params["entry"])
        if params["token"] is not None and "attempt" in attempt_facts:
            # The runner's attempt ran although the step had settled: its facts stand alone.
            entries_add(
                entry(
                    kind=EntryKind.ATTEMPT_ENDED,
                    task_id=task_id,
                    step_id=params["step"],
                    **{k: v for k, v in attempt_facts.items() if k in _ATTEMPT_FACTS},
                )
            )
        if state != params["state"]:
            outcome = json.loads(params["outcome"])
            step = Step(pk=params["step"], task_id=task_id, state=state, key=key)
            step_conflict(
                step=step,
                reason=(
                    f"step {key} is settled {state} but {params['via']} reports "
                    f"{params['state']}: {params['detail']}"
                ),
                via=params["via"],
                actor=params["actor"],
                reported=params["state"],
                **outcome,
            )


# What an attempt's facts are (journal.perform's attempt_facts), when written on their own.
_ATTEMPT_FACTS = ("attempt", "observed", "error_class", "status", "code", "classified")


def step_conflict(*, step: Step, reason: str, via: str, actor: str = "", **facts: Any) -> None:
    """Record that a report about ``step`` contradicts the journal or does not fit the step,
    and hand its task to a human — whatever the task's status, finished ones included. The
    step keeps its state."""
    with transaction.atomic():
        entries_add(
            entry(
                kind=EntryKind.CONFLICT,
                task_id=step.task_id,
                step_id=step.pk,
                actor=actor,
                kept=step.state,
                via=via,
                reason=reason,
                **facts,
            )
        )
        task_flag(
            task_id=step.task_id,
            code=Attention.CONFLICT,
            reason=reason,
            step_id=step.pk,
            actor=actor,
        )


def step_mark_unknown(
    *,
    lease: Lease,
    step: Step,
    outcome: Outcome,
    next_check_in: float | None,
    extra: Sequence[Entry] = (),
    give_up: tuple[Attention, str] | None = None,
    count_round: bool = False,
) -> None:
    """Record that ``step`` may have happened, and what is being done to find out.

    With ``next_check_in`` the step is looked up again after that many seconds and the
    task waits until then; with ``None`` nothing more can be done automatically and the
    task needs a human (``give_up`` says why, as a code and a sentence).
    """
    if outcome.state != StepState.UNKNOWN:
        raise ValueError("step_mark_unknown takes an unknown outcome")
    if next_check_in is None and give_up is None:
        raise ValueError("a step that will not be looked up again needs a reason to give up")
    with transaction.atomic():
        fence(lease)
        updated = Step.objects.filter(pk=step.pk, state__in=LIVE_STATES).update(
            state=StepState.UNKNOWN,
            detail=outcome.detail,
            outcome=dict(outcome.data),
            lookups=F("lookups") + (1 if count_round else 0),
            next_check_at=(
                Now() + timedelta(seconds=next_check_in) if next_check_in is not None else None
            ),
        )
        if not updated:
            # Settled meanwhile by a webhook or another report: that outcome stands.
            entries_add(*extra)
            return
        entries_add(
            *extra,
            entry(
                kind=EntryKind.STEP_SETTLED,
                task_id=step.task_id,
                step_id=step.pk,
                state=StepState.UNKNOWN,
                detail=outcome.detail,
                **dict(outcome.data),
            ),
        )
        if next_check_in is not None:
            task_transition(
                task_id=step.task_id,
                to=TaskStatus.WAITING,
                frm=[TaskStatus.RUNNABLE],
                step_id=step.pk,
                wake_in=next_check_in,  # the step's next_check_at: one clock, one commit
                reason=f"step {step.key} is unknown; next lookup in {next_check_in:g} s",
            )
        elif give_up is not None:
            code, why = give_up
            task_flag(task_id=step.task_id, code=code, reason=why, step_id=step.pk)
    step.state = StepState.UNKNOWN
    step.lookups += 1 if count_round else 0
