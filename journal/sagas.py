"""Sagas: effects that belong together (docs/design.md §7).

The mechanism knows no provider. Each step declares, when it is recorded, the tool that
undoes it (``Step.undo_tool``); each tool maps its own frozen arguments and evidence to its
undo's arguments. When a saga cannot complete, it **unwinds**: its done steps are undone
newest first, each undo recorded as a step of its own — keyed from the step it undoes,
linked to it (one standing undo per step, by the database), three-state, reconciled and
retried like any step. A saga is *compensated* only when every undo is done.

A saga can be **held** before a step for a person: the decided call (tool, arguments, and
their digest) waits in an :class:`~journal.models.Approval`; the person's decision is bound
to that digest, expires, and is used once — the step recorded from it is exactly what was
approved, and the planner is not asked again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from django.db.models.functions import Now

from journal.leases import Lease, TaskMoved, lease_call
from journal.models import Approval, ApprovalState, Step
from journal.outcomes import StepState
from journal.policy import Policy
from journal.protocols import StepFact

# Settled steps always have a time; this only orders a fact that somehow lacks one first.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def saga_unwind(*, lease: Lease, reason: str) -> bool:
    """From now on the saga compensates instead of going forward (its runner, under its
    lease). Returns whether this call started it (it may already be unwinding)."""
    return bool(lease_call(lease, "journal_saga_unwind", reason=reason).started)


@dataclass(frozen=True)
class Undo:
    """Undo ``target`` now (``retries``: harness retries of its undo before this one)."""

    target: StepFact
    retries: int = 0


@dataclass(frozen=True)
class UndoLater:
    """The last undo of ``target`` could not be sent; try again at ``due``."""

    target: StepFact
    retries: int
    due: datetime


@dataclass(frozen=True)
class UndoFailed:
    """The undo of ``target`` did not happen and will not by itself: a person must act.
    ``last`` is the undo that did not happen."""

    target: StepFact
    why: str
    last: StepFact | None = None


UndoNext = Undo | UndoLater | UndoFailed | None


def completion_order(steps: Sequence[StepFact]) -> list[StepFact]:
    """Done effects that declared an undo and still stand, newest completion first."""
    targets = [
        s
        for s in steps
        if s.state == StepState.DONE and s.undo_tool and not s.offset and s.offsets is None
    ]
    return sorted(targets, key=lambda s: (s.settled_at or EPOCH, s.n), reverse=True)


def next_undo(steps: Sequence[StepFact], policy: Policy) -> UndoNext:
    """What unwinding does next, from the journal's facts: ``None`` when every done effect
    that can be undone has been (the saga is compensated)."""
    for target in completion_order(steps):
        undos = [s for s in steps if s.offsets == target.n]
        if not undos:
            return Undo(target)
        last = undos[-1]
        if last.state != StepState.NOT_DONE:  # done (then target.offset) or open: reconciled
            continue
        if last.transient and last.retries < len(policy.transient_retry_delays):
            delay = policy.transient_retry_delays[last.retries]
            due = (last.settled_at or EPOCH) + timedelta(seconds=delay)
            return UndoLater(target, last.retries + 1, due)
        return UndoFailed(
            target,
            f"the undo of step {target.key} ({target.tool}) by {last.tool} did not happen: "
            f"{last.detail}; the effect still stands",
            last,
        )
    return None


# --- Approvals ------------------------------------------------------------------------------


def approval_open(*, task_id: UUID) -> Approval | None:
    """The task's approval that is pending or approved and unused (at most one), with
    ``expired`` judged by the database's clock."""
    return (
        Approval.objects.filter(
            task_id=task_id, state__in=[ApprovalState.PENDING, ApprovalState.APPROVED]
        )
        .annotate(db_now=Now())
        .first()
    )


def is_expired(approval: Approval) -> bool:
    now: datetime = approval.db_now  # type: ignore[attr-defined]
    return now >= approval.expires_at


def approval_request(
    *, lease: Lease, tool: str, args: Mapping[str, Any], reason: str, ttl: timedelta
) -> Approval:
    """Hold the saga before this call until a person decides: the approval row, and the
    task awaiting approval, in one statement (journal_approval_request), the lease given
    back with it (the run ends here)."""
    row = lease_call(
        lease,
        "journal_approval_request",
        tool=tool,
        args=dict(args),
        reason=reason,
        ttl=ttl.total_seconds(),
    )
    if row.approval is None:
        raise TaskMoved(f"task {lease.task_id} is not runnable: nothing was held")
    lease.released = True
    return Approval.objects.get(pk=row.approval)


def approval_expire(*, lease: Lease, approval: Approval) -> bool:
    """Mark an approval that was not decided or used in time as expired (its runner, under
    its lease). Returns whether it expired now."""
    return bool(lease_call(lease, "journal_approval_expire", approval=approval.pk).expired)


def approval_spent(*, lease: Lease, approval: Approval, step: Step) -> None:
    """The approved call was recorded but refused (another effect on its object stood in the
    way): the approval is used up by that step, and the saga decides again."""
    lease_call(lease, "journal_approval_spend", approval=approval.pk, step=step.pk)


class ApprovalNotUsable(Exception):
    """The approval is no longer approved for exactly this call (used, expired, another)."""


def effect_checked(*, lease: Lease, fact: StepFact, stands: bool | None, error: str = "") -> None:
    """Record what the provider said about whether an earlier effect still stands."""
    lease_call(lease, "journal_effect_checked", n=fact.n, stands=stands, error=error)
