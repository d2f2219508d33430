"""Changing a step's state: starting an attempt, settling it, marking it unknown.

Settling to ``done`` or ``not_done`` is monotone and needs no lease: the runner, a lookup
and a provider's webhook may all report the same effect, in any order, and only the first
report changes anything. Marking ``unknown`` and starting attempts belong to the lease
holder.

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

from django.db import connection, transaction
from django.db.models import F, Subquery
from django.db.models.functions import Now

from journal.db import prepared_cursor
from journal.entries import entry
from journal.leases import Lease, LeaseLost, fence, lease_seconds
from journal.models import Attention, Entry, EntryKind, Step, TaskStatus
from journal.outcomes import LIVE_STATES, SETTLED_STATES, Outcome, StepState
from journal.status import task_flag, task_transition


class StepAlreadySettled(Exception):
    """The step settled meanwhile (a webhook beat the runner); there is nothing to retry."""


def _lock_task_of(step_id: int) -> str:
    """Lock the task row of a step (waiting for any writer of it to commit), note that the
    task changed (its runner reads its facts again), and return its status."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE journal_task SET version = version + 1
             WHERE id = (SELECT task_id FROM journal_step WHERE id = %s)
         RETURNING status
            """,
            [step_id],
        )
        row = cursor.fetchone()
    if row is None:
        raise Step.DoesNotExist(f"no step {step_id}")
    return str(row[0])


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
        entries = [
            entry(
                kind=EntryKind.ATTEMPT_STARTED,
                task_id=step.task_id,
                step_id=step.pk,
                attempt=attempt,
                key=step.key,
            )
        ]
        if lookup is not None:
            entries.insert(
                0, entry(kind=EntryKind.LOOKUP, task_id=step.task_id, step_id=step.pk, **lookup)
            )
        Entry.objects.bulk_create(entries)
    step.attempts = attempt
    step.lookups += 1
    step.state = StepState.PENDING
    return attempt


# journal_settle (migration 0007): fence, settle the step, write its one entry.
SETTLE = (
    "SELECT * FROM journal_settle(%s::bigint, %s::uuid, %s::bigint, %s::float8, %s::text, "
    "%s::text, %s::jsonb, %s::jsonb)"
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
) -> bool:
    """Settle a step ``done`` or ``not_done``. Returns whether this call changed it.

    A settled step never moves: a repeated report changes nothing; a contradicting one is
    logged as a conflict and the task is flagged for a human. When the step settles, a
    task that was waiting for it can advance again; a ``done`` undo marks the step it
    undoes as offset (so its object's once-only effect may happen again).
    """
    if outcome.state not in SETTLED_STATES:
        raise ValueError(f"step_settle takes done or not_done, not {outcome.state}")
    if lease is not None and not extra and not actor:
        changed = _settle_fast(lease, step_id, outcome, via, attempt or {})
        if changed:
            return True
        # Settled meanwhile (a webhook beat the runner): the slow path tells a repeat from a
        # contradiction, and records the attempt that ran anyway.
    if attempt:
        step = Step.objects.only("task_id").get(pk=step_id)
        extra = [
            entry(
                kind=EntryKind.ATTEMPT_ENDED,
                task_id=step.task_id,
                step_id=step_id,
                **dict(attempt),
            ),
            *extra,
        ]
    with transaction.atomic():
        status = fence(lease).status if lease is not None else _lock_task_of(step_id)
        with connection.cursor() as cursor:
            cursor.execute(
                """
                UPDATE journal_step
                   SET state = %s, detail = %s, outcome = %s::jsonb, settled_at = now(),
                       next_check_at = NULL
                 WHERE id = %s AND state IN (%s, %s)
             RETURNING task_id, key, offsets_id
                """,
                [
                    outcome.state,
                    outcome.detail,
                    json.dumps(dict(outcome.data)),
                    step_id,
                    *LIVE_STATES,
                ],
            )
            row = cursor.fetchone()
        if row is None:
            step = Step.objects.only("task_id", "state", "key").get(pk=step_id)
            Entry.objects.bulk_create(list(extra))
            if step.state != outcome.state:
                step_conflict(
                    step=step,
                    reason=(
                        f"step {step.key} is settled {step.state} but {via} reports "
                        f"{outcome.state}: {outcome.detail}"
                    ),
                    via=via,
                    actor=actor,
                    reported=outcome.state,
                    **dict(outcome.data),
                )
            return False
        task_id, key, offsets_id = row
        Entry.objects.bulk_create(
            [
                *extra,
                entry(
                    kind=EntryKind.STEP_SETTLED,
                    task_id=task_id,
                    step_id=step_id,
                    actor=actor,
                    state=outcome.state,
                    via=via,
                    detail=outcome.detail,
                    **dict(outcome.data),
                ),
            ]
        )
        if offsets_id is not None and outcome.state == StepState.DONE:
            Step.objects.filter(pk=offsets_id, offset_by__isnull=True).update(offset_by=step_id)
        if status == TaskStatus.WAITING:
            task_transition(
                task_id=task_id,
                to=TaskStatus.RUNNABLE,
                frm=[TaskStatus.WAITING],
                step_id=step_id,
                actor=actor,
                reason=f"step {key} settled {outcome.state} ({via})",
            )
    return True


def _settle_fast(
    lease: Lease, step_id: int, outcome: Outcome, via: str, attempt: Mapping[str, Any]
) -> bool:
    """The runner's own settlement: one statement, one entry (with the attempt that ended).
    Returns whether it changed the step."""
    data = {
        "state": outcome.state,
        "via": via,
        "detail": outcome.detail,
        **dict(outcome.data),
        **dict(attempt),
    }
    in_block = connection.in_atomic_block
    with transaction.atomic() if in_block else nullcontext():
        with prepared_cursor() as cursor:
            cursor.execute(
                SETTLE,
                [
                    step_id,
                    lease.task_id,
                    lease.token,
                    lease_seconds(),
                    outcome.state,
                    outcome.detail,
                    json.dumps(dict(outcome.data)),
                    json.dumps(data),
                ],
            )
            row = cursor.fetchone()
        if row is None:
            raise LeaseLost.of(lease)
        changed, version, status = bool(row[0]), int(row[1]), str(row[2])
        lease.versions.append(version)
        if changed and status == TaskStatus.WAITING:
            task_transition(
                task_id=lease.task_id,
                to=TaskStatus.RUNNABLE,
                frm=[TaskStatus.WAITING],
                step_id=step_id,
                reason=f"step {step_id} settled {outcome.state} ({via})",
            )
    return changed


def step_conflict(*, step: Step, reason: str, via: str, actor: str = "", **facts: Any) -> None:
    """Record that a report about ``step`` contradicts the journal or does not fit the step,
    and hand its task to a human — whatever the task's status, finished ones included. The
    step keeps its state."""
    with transaction.atomic():
        entry(
            kind=EntryKind.CONFLICT,
            task_id=step.task_id,
            step_id=step.pk,
            actor=actor,
            kept=step.state,
            via=via,
            reason=reason,
            **facts,
        ).save()
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
            Entry.objects.bulk_create(list(extra))
            return
        Entry.objects.bulk_create(
            [
                *extra,
                entry(
                    kind=EntryKind.STEP_SETTLED,
                    task_id=step.task_id,
                    step_id=step.pk,
                    state=StepState.UNKNOWN,
                    detail=outcome.detail,
                    **dict(outcome.data),
                ),
            ]
        )
        if next_check_in is not None:
            task_transition(
                task_id=step.task_id,
                to=TaskStatus.WAITING,
                frm=[TaskStatus.RUNNABLE],
                step_id=step.pk,
                wake_at=Subquery(Step.objects.filter(pk=step.pk).values("next_check_at")[:1]),
                reason=f"step {step.key} is unknown; next lookup in {next_check_in:g} s",
            )
        elif give_up is not None:
            code, why = give_up
            task_flag(task_id=step.task_id, code=code, reason=why, step_id=step.pk)
    step.state = StepState.UNKNOWN
    step.lookups += 1 if count_round else 0
