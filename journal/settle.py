"""Changing a step's state: starting an attempt, settling it, marking it unknown.

Settling to ``done`` or ``not_done`` is monotone and needs no lease: the runner, a lookup
and a provider's webhook may all report the same effect, in any order, and only the first
report changes anything. Marking ``unknown`` and starting attempts belong to the lease
holder.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Now

from journal.leases import Lease, fence
from journal.models import Entry, EntryKind, Step, Task, TaskStatus
from journal.outcomes import LIVE_STATES, SETTLED_STATES, Outcome, StepState
from journal.record import entry


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
        Task.objects.filter(pk=step.task_id, status=TaskStatus.WAITING).update(
            status=TaskStatus.RUNNING
        )
    step.attempts = attempt
    step.lookups += 1
    step.state = StepState.PENDING
    return attempt


class StepAlreadySettled(Exception):
    """The step settled meanwhile (a webhook beat the runner); there is nothing to retry."""


def step_settle(
    *,
    step_id: int,
    outcome: Outcome,
    via: str,
    lease: Lease | None = None,
    extra: list[Entry] | None = None,
    actor: str = "",
) -> bool:
    """Settle a step ``done`` or ``not_done``. Returns whether this call changed it.

    A settled step never moves: a repeated report changes nothing; a contradicting one is
    logged as a conflict and the task is flagged for a human. When the step settles, a
    task that was waiting for it becomes runnable again.
    """
    if outcome.state not in SETTLED_STATES:
        raise ValueError(f"step_settle takes done or not_done, not {outcome.state}")
    with transaction.atomic():
        if lease is not None:
            fence(lease)
        # One statement settles the step and wakes a task that was waiting for it.
        with connection.cursor() as cursor:
            cursor.execute(
                """
                WITH settled AS (
                    UPDATE journal_step
                       SET state = %s, detail = %s, outcome = %s::jsonb, settled_at = now(),
                           next_check_at = NULL
                     WHERE id = %s AND state IN ('pending', 'unknown')
                 RETURNING task_id, key
                ), woken AS (
                    UPDATE journal_task SET status = 'running'
                     WHERE id IN (SELECT task_id FROM settled) AND status = 'waiting'
                )
                SELECT task_id, key FROM settled
                """,
                [outcome.state, outcome.detail, json.dumps(dict(outcome.data)), step_id],
            )
            row = cursor.fetchone()
        changed = row is not None
        step = (
            Step(pk=step_id, task_id=row[0], key=row[1], state=outcome.state)
            if row is not None
            else Step.objects.only("task_id", "state", "key").get(pk=step_id)
        )
        entries = list(extra or [])
        if changed:
            entries.append(
                entry(
                    kind=EntryKind.STEP_SETTLED,
                    task_id=step.task_id,
                    step_id=step_id,
                    actor=actor,
                    state=outcome.state,
                    via=via,
                    detail=outcome.detail,
                    **dict(outcome.data),
                )
            )
        elif step.state != outcome.state:
            reason = (
                f"step {step.key} is settled {step.state} but {via} reports {outcome.state}: "
                f"{outcome.detail}"
            )
            entries.append(
                entry(
                    kind=EntryKind.CONFLICT,
                    task_id=step.task_id,
                    step_id=step_id,
                    actor=actor,
                    reported=outcome.state,
                    kept=step.state,
                    via=via,
                    **dict(outcome.data),
                )
            )
            entries.append(
                entry(
                    kind=EntryKind.TASK_FLAGGED,
                    task_id=step.task_id,
                    step_id=step_id,
                    reason=reason,
                )
            )
            Task.objects.filter(pk=step.task_id).exclude(status=TaskStatus.FINISHED).update(
                status=TaskStatus.NEEDS_HUMAN, attention=reason
            )
        Entry.objects.bulk_create(entries)
    return changed


def step_mark_unknown(
    *,
    lease: Lease,
    step: Step,
    outcome: Outcome,
    next_check_in: float | None,
    extra: list[Entry] | None = None,
    give_up_reason: str = "",
    count_round: bool = False,
) -> None:
    """Record that ``step`` may have happened, and what is being done to find out.

    With ``next_check_in`` the step is looked up again after that many seconds and the
    task waits; with ``None`` nothing more can be done automatically and the task needs a
    human (``give_up_reason`` says why).
    """
    if outcome.state != StepState.UNKNOWN:
        raise ValueError("step_mark_unknown takes an unknown outcome")
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
            Entry.objects.bulk_create(list(extra or []))
            return
        entries = [
            *(extra or []),
            entry(
                kind=EntryKind.STEP_SETTLED,
                task_id=step.task_id,
                step_id=step.pk,
                state=StepState.UNKNOWN,
                detail=outcome.detail,
                **dict(outcome.data),
            ),
        ]
        if next_check_in is not None:
            entries.append(
                entry(
                    kind=EntryKind.TASK_WAITING,
                    task_id=step.task_id,
                    step_id=step.pk,
                    next_check_in=next_check_in,
                )
            )
            Task.objects.filter(pk=step.task_id, status=TaskStatus.RUNNING).update(
                status=TaskStatus.WAITING
            )
        else:
            entries.append(
                entry(
                    kind=EntryKind.TASK_FLAGGED,
                    task_id=step.task_id,
                    step_id=step.pk,
                    reason=give_up_reason,
                )
            )
            Task.objects.filter(pk=step.task_id).update(
                status=TaskStatus.NEEDS_HUMAN, attention=give_up_reason
            )
        Entry.objects.bulk_create(entries)
    step.state = StepState.UNKNOWN
    step.lookups += 1 if count_round else 0
