"""The runner: advance one task, one decided step at a time (docs/design.md §4).

``task_advance`` is what a worker job calls. It takes the task's lease, then loops:
reconcile an open step if one is due; retry a step that did not happen for a passing
reason; otherwise ask the planner for the next decision (only about steps not yet decided),
record it, perform it. It stops when the task is finished, waits until a time, needs a
human, or another runner holds the lease.

Nothing a planner or a tool adapter raises escapes as a crash to be re-run forever: it is
recorded, while the lease is still held, as the reason the task needs a human.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.db.models.functions import Now

from journal.leases import Lease, LeaseLost, fence, lease_acquire, lease_release
from journal.models import Attention, Task, TaskStatus
from journal.outcomes import StepState
from journal.perform import step_perform, step_reconcile
from journal.policy import DEFAULT_POLICY, Policy
from journal.protocols import Call, Decision, Finish, Planner, Rules, StepFact, TaskFacts, Tool
from journal.record import step_record, task_finish
from journal.selectors import task_facts, task_open_step
from journal.status import FINAL, task_flag, task_transition
from journal.summary import task_summary


@dataclass(frozen=True)
class Advance:
    """Why the runner stopped: ``finished``, ``cancelled``, ``waiting``, ``needs_human`` or
    ``busy`` (another runner holds the task)."""

    stopped: str
    steps_performed: int = 0


class _Handover(Exception):
    """Stop here and hand the task to a human for this reason."""

    def __init__(self, code: Attention, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


# A database that went away: nothing can be recorded, so the run just ends (the lease
# expires or the next runner takes over); every other failure is recorded and handed over.
_DATABASE_LOST = (OperationalError, InterfaceError)


def task_advance(
    *,
    task_id: UUID,
    planner: Planner,
    tools: Mapping[str, Tool],
    owner: str | None = None,
    policy: Policy = DEFAULT_POLICY,
    rules: Rules | None = None,
) -> Advance:
    lease = lease_acquire(task_id=task_id, owner=owner or f"runner-{uuid.uuid4()}")
    if lease is None:
        return Advance("busy")
    try:
        if lease.failed_runs >= policy.max_failed_runs:
            raise _Handover(
                Attention.RUN_FAILURES,
                f"the last {lease.failed_runs} runs of this task ended without finishing "
                "cleanly (a worker died or lost its database); it is not run again until a "
                "person looks",
            )
        result = _advance(lease=lease, planner=planner, tools=tools, policy=policy, rules=rules)
    except LeaseLost:
        return Advance("busy")
    except _DATABASE_LOST:
        _release_quietly(lease, clean=False)
        raise
    except _Handover as handover:
        return _hand_over(lease, handover.code, handover.reason)
    except Exception as exc:  # a bug in an adapter or the harness: recorded, not re-run
        return _hand_over(
            lease,
            Attention.HARNESS_FAILED,
            f"advancing the task raised {type(exc).__name__}: {str(exc)[:500]}",
        )
    _release_quietly(lease, clean=True)
    return result


def _hand_over(lease: Lease, code: Attention, reason: str) -> Advance:
    try:
        task_flag(lease=lease, task_id=lease.task_id, code=code, reason=reason)
    except LeaseLost:
        return Advance("busy")
    _release_quietly(lease, clean=True)
    return Advance("needs_human")


def _release_quietly(lease: Lease, *, clean: bool) -> None:
    # An unreleased lease expires by itself; failing to release is no reason to fail.
    with contextlib.suppress(Exception):
        lease_release(lease, clean=clean)


def _advance(
    *,
    lease: Lease,
    planner: Planner,
    tools: Mapping[str, Tool],
    policy: Policy,
    rules: Rules | None,
) -> Advance:
    performed = 0
    while True:
        task = Task.objects.annotate(db_now=Now()).get(pk=lease.task_id)
        now: datetime = task.db_now  # type: ignore[attr-defined]
        if task.status in FINAL:
            return Advance(task.status, performed)
        if task.status == TaskStatus.NEEDS_HUMAN:
            return Advance("needs_human", performed)
        if task.status == TaskStatus.WAITING:
            if task.wake_at is not None and task.wake_at > now:
                return Advance("waiting", performed)
            task_transition(
                lease=lease,
                task_id=task.pk,
                to=TaskStatus.RUNNABLE,
                frm=[TaskStatus.WAITING],
                reason="its time came",
            )
            continue
        open_step = task_open_step(task_id=task.pk)
        if open_step is not None:
            # A pending step seen by a new lease holder was abandoned by a dead runner: it is
            # unknown, and reconciled at once. An unknown one waits for its lookup time.
            if open_step.state == StepState.UNKNOWN and not open_step.due:  # type: ignore[attr-defined]
                _wait(lease, until=open_step.next_check_at or now, why=f"step {open_step.key}")
                return Advance("waiting", performed)
            step_reconcile(
                lease=lease, step=open_step, tool=tools.get(open_step.tool), policy=policy
            )
            performed += 1
            continue
        if task.step_count >= policy.max_steps:
            raise _Handover(
                Attention.STEP_LIMIT,
                f"the task reached its limit of {policy.max_steps} steps without finishing",
            )
        facts = task_facts(task=task)
        retry = _transient_retry(facts, policy)
        if retry is not None:
            last, due = retry
            if due > now:
                _wait(lease, until=due, why=f"a retry of step {last.key}")
                return Advance("waiting", performed)
            decision: Decision = Call(last.tool, last.args, raw={"harness": "retry", "of": last.n})
            retries = last.retries + 1
        else:
            decision = _decide(lease, planner, facts)
            retries = 0
        if isinstance(decision, Finish):
            task_finish(lease=lease, decision=decision, summary=task_summary(facts.steps))
            return Advance("finished", performed)
        step = step_record(
            lease=lease,
            decision=decision,
            tools=tools,
            rules=rules,
            facts=facts,
            retries=retries,
            policy=policy,
        )
        if step.state == StepState.PENDING:
            step_perform(lease=lease, step=step, tool=tools[step.tool], policy=policy)
            performed += 1


def _decide(lease: Lease, planner: Planner, facts: TaskFacts) -> Decision:
    """Ask the planner, under a lease stretched to cover its longest answer."""
    budget = planner.max_duration
    if budget > timedelta(0):
        # The usual lease on top, so the stretch never shortens it.
        fence(lease, seconds=budget.total_seconds() + float(settings.JOURNAL_LEASE_SECONDS))
    try:
        return planner.decide(facts)
    except Exception as exc:  # any planner failure: nothing was decided, a person looks
        raise _Handover(
            Attention.PLANNER_FAILED,
            f"the planner failed: {type(exc).__name__}: {str(exc)[:500]}",
        ) from exc


def _transient_retry(facts: TaskFacts, policy: Policy) -> tuple[StepFact, datetime] | None:
    """The last step, when it did not happen for a passing reason and may be tried again."""
    if not facts.steps:
        return None
    last = facts.steps[-1]
    if last.state != StepState.NOT_DONE or not last.transient or last.refusal:
        return None
    if last.retries >= len(policy.transient_retry_delays) or last.settled_at is None:
        return None
    return last, last.settled_at + timedelta(seconds=policy.transient_retry_delays[last.retries])


def _wait(lease: Lease, *, until: datetime, why: str) -> None:
    task_transition(
        lease=lease,
        task_id=lease.task_id,
        to=TaskStatus.WAITING,
        frm=[TaskStatus.RUNNABLE],
        wake_at=until,
        reason=f"waiting for {why}",
    )
