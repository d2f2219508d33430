"""The runner: advance one task, one decided step at a time (DESIGN §4).

``task_advance`` is what a worker job calls. It takes the task's lease, then loops:
reconcile an open step if one is due; otherwise ask the planner for the next decision
(only about steps not yet decided), record it, perform it. It stops when the task is
finished, waits on an unknown step, needs a human, or another runner holds the lease.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from uuid import UUID

from journal.leases import Lease, LeaseLost, lease_acquire, lease_release
from journal.models import Task, TaskStatus
from journal.outcomes import StepState
from journal.perform import step_perform, step_reconcile
from journal.policy import DEFAULT_POLICY, Policy
from journal.protocols import Finish, Planner, Tool
from journal.record import step_record, task_finish, task_flag
from journal.selectors import task_facts, task_open_step


@dataclass(frozen=True)
class Advance:
    """Why the runner stopped: ``finished``, ``waiting``, ``needs_human`` or ``busy``."""

    stopped: str
    steps_performed: int = 0


def task_advance(
    *,
    task_id: UUID,
    planner: Planner,
    tools: Mapping[str, Tool],
    owner: str | None = None,
    policy: Policy = DEFAULT_POLICY,
) -> Advance:
    lease = lease_acquire(task_id=task_id, owner=owner or f"runner-{uuid.uuid4()}")
    if lease is None:
        return Advance("busy")
    try:
        result = _advance(lease=lease, planner=planner, tools=tools, policy=policy)
    except LeaseLost:
        return Advance("busy")
    except Exception:
        # An ordinary failure (a planner error, a lost database connection) frees the task
        # for the next runner at once. A crash frees nothing: the lease simply expires.
        _release_quietly(lease)
        raise
    _release_quietly(lease)
    return result


def _release_quietly(lease: Lease) -> None:
    # An unreleased lease expires by itself; failing to release is no reason to fail.
    with contextlib.suppress(Exception):
        lease_release(lease)


def _advance(
    *, lease: Lease, planner: Planner, tools: Mapping[str, Tool], policy: Policy
) -> Advance:
    performed = 0
    while True:
        task = Task.objects.get(pk=lease.task_id)
        if task.status == TaskStatus.FINISHED:
            return Advance("finished", performed)
        if task.status == TaskStatus.NEEDS_HUMAN:
            return Advance("needs_human", performed)
        open_step = task_open_step(task_id=task.pk)
        if open_step is not None:
            # A pending step seen by a new lease holder was abandoned by a dead runner: it is
            # unknown, and reconciled at once. An unknown one waits for its lookup time.
            if open_step.state == StepState.UNKNOWN and not open_step.due:  # type: ignore[attr-defined]
                return Advance("waiting", performed)
            step_reconcile(
                lease=lease, step=open_step, tool=tools.get(open_step.tool), policy=policy
            )
            performed += 1
            continue
        if task.step_count >= policy.max_steps:
            task_flag(
                lease=lease,
                task_id=task.pk,
                reason=f"the task reached its limit of {policy.max_steps} steps without finishing",
            )
            return Advance("needs_human", performed)
        decision = planner.decide(task_facts(task=task))
        if isinstance(decision, Finish):
            task_finish(lease=lease, decision=decision)
            return Advance("finished", performed)
        step = step_record(lease=lease, decision=decision, tools=tools)
        if step.state == StepState.PENDING:
            step_perform(lease=lease, step=step, tool=tools[step.tool], policy=policy)
            performed += 1
