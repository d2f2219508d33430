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

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Now

from journal.entries import entries_add, entry
from journal.leases import Lease, fence
from journal.models import Approval, ApprovalState, EntryKind, Step, Task, TaskStatus
from journal.outcomes import StepState
from journal.policy import Policy
from journal.protocols import StepFact
from journal.status import task_transition

# Settled steps always have a time; this only orders a fact that somehow lacks one first.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def digest(tool: str, args: Mapping[str, Any]) -> str:
    """What an approval is bound to: the tool and its exact arguments."""
    canonical = json.dumps({"tool": tool, "args": args}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


# --- Unwinding ------------------------------------------------------------------------------


def saga_unwind(*, task_id: UUID, reason: str, actor: str = "", lease: Lease | None = None) -> bool:
    """From now on the saga compensates instead of going forward. Returns whether this call
    started it (it may already be unwinding)."""
    with transaction.atomic():
        if lease is not None:
            fence(lease)
        started = Task.objects.filter(pk=task_id, unwinding=False).update(
            unwinding=True, version=F("version") + 1
        )
        if started:
            entries_add(
                entry(kind=EntryKind.SAGA_UNWINDING, task_id=task_id, actor=actor, reason=reason)
            )
    return bool(started)


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
    task awaiting approval, in one commit."""
    with transaction.atomic():
        fence(lease)
        approval = Approval.objects.create(
            task_id=lease.task_id,
            tool=tool,
            args=dict(args),
            digest=digest(tool, args),
            reason=reason,
            expires_at=Now() + ttl,
        )
        task_transition(
            task_id=lease.task_id,
            to=TaskStatus.AWAITING_APPROVAL,
            frm=[TaskStatus.RUNNABLE],
            reason=reason,
            approval=approval.pk,
            tool=tool,
            digest=approval.digest,
        )
    approval.refresh_from_db()
    return approval


def approval_expire(*, approval: Approval, actor: str = "") -> None:
    """Mark an approval that was not decided or used in time as expired."""
    with transaction.atomic():
        expired = Approval.objects.filter(
            pk=approval.pk, state__in=[ApprovalState.PENDING, ApprovalState.APPROVED]
        ).update(state=ApprovalState.EXPIRED)
        if expired:
            entries_add(
                entry(
                    kind=EntryKind.APPROVAL_DECIDED,
                    task_id=approval.task_id,
                    actor=actor,
                    approval=approval.pk,
                    decision="expired",
                    expires_at=approval.expires_at.isoformat(),
                )
            )


def approval_spent(*, approval: Approval, step: Step) -> None:
    """The approved call was recorded but refused (another effect on its object stood in the
    way): the approval is used up by that step, and the saga decides again."""
    Approval.objects.filter(pk=approval.pk, state=ApprovalState.APPROVED).update(
        state=ApprovalState.USED, used_by=step
    )


class ApprovalNotUsable(Exception):
    """The approval is no longer approved for exactly this call (used, expired, another)."""


def effect_checked(*, lease: Lease, fact: StepFact, stands: bool | None, error: str = "") -> None:
    """Record what the provider said about whether an earlier effect still stands."""
    with transaction.atomic():
        fence(lease)
        step = Step.objects.only("pk").get(task_id=lease.task_id, n=fact.n)
        entries_add(
            entry(
                kind=EntryKind.EFFECT_CHECKED,
                task_id=lease.task_id,
                step_id=step.pk,
                stands=stands,
                **({"error": error} if error else {}),
            )
        )
