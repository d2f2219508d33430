"""The runner: advance one task, one decided step at a time (docs/design.md §4).

``task_advance`` is what a worker job calls. It takes the task's lease, then loops: the
pure ``journal.moves.next_move`` decides what comes next (reconcile an open step if one is
due; retry a step that did not happen for a passing reason; otherwise ask the planner for
the next decision, only about steps not yet decided, and record it), and the runner
performs that move under its lease. It stops when the task is finished, waits until a
time, needs a human, or another runner holds the lease.

Nothing a planner or a tool adapter raises escapes as a crash to be re-run forever: it is
recorded, while the lease is still held, as the reason the task needs a human.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, assert_never
from uuid import UUID

from django.conf import settings
from django.db import InterfaceError, InternalError, OperationalError, connection

from journal import moves
from journal.events import StepEvent
from journal.leases import (
    Lease,
    LeaseLost,
    TaskMoved,
    lease_acquire,
    lease_release,
    settle_held,
)
from journal.models import Attention, Entry, EntryKind, Step, Task, TaskStatus
from journal.moves import MIN_BLOCKED_WAIT as MIN_BLOCKED_WAIT
from journal.moves import blocked_until as blocked_until
from journal.moves import first_delay
from journal.outcomes import LIVE_STATES, StepState
from journal.perform import step_perform, step_reconcile
from journal.policy import DEFAULT_POLICY, Policy
from journal.protocols import (
    CLOSING,
    Call,
    Decision,
    Finish,
    Planner,
    Rules,
    StepFact,
    TaskFacts,
    Tool,
)
from journal.record import decision_check, step_record, task_finish
from journal.sagas import (
    ApprovalNotUsable,
    approval_expire,
    approval_open,
    approval_request,
    approval_spent,
    effect_checked,
    is_expired,
    saga_unwind,
)
from journal.selectors import task_open_step
from journal.status import task_await, task_flag, task_wait, task_wake
from journal.summary import fell_short, task_summary
from journal.view import View


@dataclass(frozen=True)
class Advance:
    """Why the runner stopped: ``finished``, ``compensated``, ``cancelled``, ``waiting``,
    ``awaiting_approval``, ``needs_human`` or ``busy`` (another runner holds the task)."""

    stopped: str
    steps_performed: int = 0
    events: tuple[StepEvent, ...] = ()
    """What the run did to steps, as its moves returned it, in order (journal/events.py):
    agentops' step logs and metrics are made from these, with nothing read back."""


class _Handover(Exception):
    """Stop here and hand the task to a human for this reason."""

    def __init__(self, code: Attention, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


# A database that went away: nothing can be recorded until it answers again, so the run
# ends there, after giving its lease back as soon as it can (_give_back).
_DATABASE_LOST = (OperationalError, InterfaceError)
# The SQLSTATE of a session the server ended because it sat idle inside a transaction for
# too long (the runner was stopped mid-write; see agentops/settings.py): an InternalError.
_IDLE_IN_TRANSACTION_TIMEOUT = "25P03"


def _database_lost(exc: BaseException) -> bool:
    if isinstance(exc, _DATABASE_LOST):
        return True
    cause = getattr(exc.__cause__, "sqlstate", None)
    return isinstance(exc, InternalError) and cause == _IDLE_IN_TRANSACTION_TIMEOUT


class DatabaseLost(Exception):
    """The run ended because its database connection failed (a restart, a network cut, a
    session the server terminated). Nothing more was recorded. ``released`` says whether the
    lease was given back once the database answered again, so the task can be run again at
    once; if not, it expires by itself (JOURNAL_LEASE_SECONDS)."""

    def __init__(
        self, task_id: UUID, *, released: bool, events: tuple[StepEvent, ...] = ()
    ) -> None:
        given = "gave its lease back" if released else "could not give its lease back"
        super().__init__(f"task {task_id}: the run lost its database and {given}")
        self.task_id, self.released = task_id, released
        self.events = events
        """What the moves that returned before the database was lost did (committed)."""


def task_take(*, task_id: UUID, owner: str) -> tuple[Task, Lease] | None:
    """Take the task's lease for a run, with what the run is built from (its kind, refs and
    plan), read in the same statement: None if a live lease is someone else's. Raises
    ``Task.DoesNotExist``. Hand the lease to :func:`task_advance` (or
    :func:`task_unbuildable`, if the run cannot be built)."""
    lease = lease_acquire(task_id=task_id, owner=owner)
    if lease is None:
        if not Task.objects.filter(pk=task_id).exists():
            raise Task.DoesNotExist(f"no task {task_id}")
        return None
    row = lease.task or {}
    task = Task(
        id=task_id, kind=row["kind"], refs=_decoded(row["refs"]), plan=_decoded(row["plan"])
    )
    return task, lease


def _decoded(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value  # jsonb as text, or not


def task_advance(
    *,
    task_id: UUID,
    planner: Planner,
    tools: Mapping[str, Tool],
    owner: str | None = None,
    policy: Policy = DEFAULT_POLICY,
    rules: Rules | None = None,
    lease: Lease | None = None,
) -> Advance:
    """Advance the task as far as it goes now, under its lease: ``lease`` if it was taken
    already (:func:`task_take`), else taken here (``busy`` if someone else holds it)."""
    if lease is None:
        lease = lease_acquire(task_id=task_id, owner=owner or f"runner-{uuid.uuid4()}")
    if lease is None:
        return Advance("busy")
    try:
        result = _run(lease=lease, planner=planner, tools=tools, policy=policy, rules=rules)
    except Exception as exc:
        if not _database_lost(exc):
            raise
        # Without this, the task would wait out its whole lease before anyone took it up.
        released = _give_back(lease, clean=False)
        raise DatabaseLost(lease.task_id, released=released, events=tuple(lease.events)) from exc
    return replace(result, events=tuple(lease.events))


def task_unbuildable(
    *, task_id: UUID, owner: str, reason: str, lease: Lease | None = None
) -> Advance:
    """A run that could not even be built (its planner or its tools: an unknown setting, a
    missing key, an import that fails) hands its task to a person, under the task's lease
    (``lease``, if it was taken already), like any other failure, and counts as a failed run.
    A task that was not due to advance (over, held, waiting for later) is left as it is, and
    nothing is counted."""
    if lease is None:
        lease = lease_acquire(task_id=task_id, owner=owner)
    if lease is None:
        return Advance("busy")
    row = lease.task or {}
    due = row.get("status") == TaskStatus.RUNNABLE or (
        row.get("status") == TaskStatus.WAITING
        and row.get("wake_at") is not None
        and row["wake_at"] <= row["db_now"]
    )
    if not due:
        _release(lease, clean=True)
        return Advance(str(row.get("status") or "busy"))
    try:
        task_flag(
            lease=lease,
            frm=(TaskStatus.RUNNABLE, TaskStatus.WAITING),
            code=Attention.MISCONFIGURED,
            reason=reason,
        )
    except LeaseLost:
        return Advance("busy")
    _release(lease, clean=False)  # the run failed: it stays counted in failed_runs
    return Advance("needs_human")


def _run(
    *,
    lease: Lease,
    planner: Planner,
    tools: Mapping[str, Tool],
    policy: Policy,
    rules: Rules | None,
) -> Advance:
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
        # Taken over: a settlement held back is not ours to write any more; the new holder
        # finds the step pending and looks it up.
        lease.held, lease.held_as = None, None
        return Advance("busy")
    except _Handover as handover:
        return _hand_over(lease, handover.code, handover.reason)
    except Exception as exc:  # a bug in an adapter or the harness: recorded, not re-run
        if _database_lost(exc):
            raise
        return _hand_over(
            lease,
            Attention.HARNESS_FAILED,
            f"advancing the task raised {type(exc).__name__}: {str(exc)[:500]}",
        )
    _release(lease, clean=True)
    return result


def _hand_over(lease: Lease, code: Attention, reason: str) -> Advance:
    try:
        task_flag(lease=lease, code=code, reason=reason, release=True)
    except LeaseLost:
        return Advance("busy")
    _release(lease, clean=True)
    return Advance("needs_human")


def _release(lease: Lease, *, clean: bool) -> None:
    if lease.released:
        return  # given back already, with the write that ended the run
    try:
        lease_release(lease, clean=clean)
    except Exception as exc:
        if _database_lost(exc):
            # Everything the run did is committed; only giving the lease back failed.
            _give_back(lease, clean=clean)
        # Otherwise: an unreleased lease expires by itself.


def _give_back(lease: Lease, *, clean: bool) -> bool:
    """Give the lease back over a new connection, retrying with backoff while the database
    is away (a restart takes seconds), for as long as the lease would last anyway: past
    that it has expired by itself. The token check makes a late release harmless to a
    runner that took over meanwhile. Returns whether it was given back."""
    deadline = time.monotonic() + float(settings.JOURNAL_LEASE_SECONDS)
    pause = 0.05
    while True:
        with contextlib.suppress(Exception):
            connection.close()  # the broken one is never reused; the next query reconnects
        try:
            lease_release(lease, clean=clean)
        except Exception as exc:
            if not _database_lost(exc) or time.monotonic() + pause > deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 1.0)
            continue
        return True


def _advance(
    *,
    lease: Lease,
    planner: Planner,
    tools: Mapping[str, Tool],
    policy: Policy,
    rules: Rules | None,
) -> Advance:
    """Decide the next move (journal/moves.py, pure), perform it, until one ends the run."""
    performed = 0
    view: View | None = None
    while True:
        if view is None or not view.current(lease):
            view = View.load(lease)
        facts, now = view.facts, view.now
        ask = _Asked(task_id=lease.task_id, tools=tools, rules=rules, facts=facts)
        move = moves.next_move(
            task=view.row(),
            facts=facts,
            now=now,
            policy=policy,
            saga=rules is not None and rules.saga,
            tools=tools,
            ask=ask,
        )
        reread = False  # after a write of its own that the view does not follow
        if isinstance(move, moves.AskPlanner):
            if move.expire is not None:
                approval_expire(lease=lease, approval=move.expire)
                reread = True
            move = moves.on_decision(_decide(lease, planner, facts), ask=ask)
        match move:
            case moves.Stop(reason):
                return Advance(reason, performed)
            case moves.WakeUp():
                task_wake(lease=lease, reason="its time came")
                view = None
            case moves.Wait(until, why):
                _wait(lease, until=until, why=why)
                return Advance("waiting", performed)
            case moves.Reconcile(step):
                step_reconcile(lease=lease, step=step, tool=tools.get(step.tool), policy=policy)
                performed += 1
                view = None
            case moves.HandOver(code, reason):
                raise _Handover(code, reason)
            case moves.Unwind(reason):
                saga_unwind(lease=lease, reason=reason)
                view = None
            case moves.Compensate(target, retries):
                try:
                    _compensate(
                        lease=lease,
                        facts=facts,
                        tools=tools,
                        policy=policy,
                        target=target,
                        retries=retries,
                    )
                except TaskMoved:
                    view = None  # changed meanwhile (a person cancelled it): look again
                    continue
                performed += 1
                view = None
            case moves.Compensated():
                closing = _closing(lease.task_id, rules, facts, policy, now)
                if isinstance(closing, datetime):
                    _wait(lease, until=closing, why="a retry of its closing call")
                    return Advance("waiting", performed)
                if closing is not None:
                    # Its last call, once (a message to the customer), then it ends.
                    call, retries = closing
                    try:
                        step = step_record(
                            lease=lease,
                            decision=call,
                            tools=tools,
                            facts=facts,
                            policy=policy,
                            retries=retries,
                            closing=True,
                        )
                    except TaskMoved:
                        view = None  # changed meanwhile (a person cancelled it): look again
                        continue
                    if step.state == StepState.PENDING:
                        step_perform(lease=lease, step=step, tool=tools[step.tool], policy=policy)
                    performed += 1
                    view = None
                    continue
                try:
                    task_finish(
                        lease=lease,
                        decision=Finish("compensated", raw={"harness": "unwound"}),
                        summary="Compensated. " + task_summary(facts.steps),
                        to=TaskStatus.COMPENSATED,
                    )
                except TaskMoved:
                    view = None  # changed meanwhile (a person cancelled it): look again
                    continue
                return Advance("compensated", performed)
            case moves.AwaitApproval(held):
                # Resumed while a decision is still awaited: wait for it again.
                if not task_await(lease=lease, approval_id=held.pk):
                    view = None
                    continue
                return Advance("awaiting_approval", performed)
            case moves.Finish(decision):
                try:
                    task_finish(
                        lease=lease,
                        decision=decision,
                        summary=task_summary(facts.steps),
                        shortfall=fell_short(facts.steps),
                    )
                except TaskMoved:
                    view = None  # changed while the planner decided: look again
                    continue
                return Advance("finished", performed)
            case moves.Hold(call, reason):
                approval_request(
                    lease=lease,
                    tool=call.tool,
                    args=call.args,
                    reason=reason,
                    ttl=timedelta(seconds=policy.approval_ttl),
                )
                return Advance("awaiting_approval", performed)
            case moves.Retry() | moves.Record():
                approval = move.approval if isinstance(move, moves.Record) else None
                if move.verify_first and not _still_standing(
                    lease=lease, facts=facts, tools=tools, policy=policy, now=now
                ):
                    return Advance("waiting", performed)
                try:
                    step = step_record(
                        lease=lease,
                        decision=move.call,
                        tools=tools,
                        rules=rules,
                        facts=facts,
                        retries=move.retries if isinstance(move, moves.Retry) else 0,
                        policy=policy,
                        approval=approval,
                    )
                except (ApprovalNotUsable, TaskMoved):
                    view = None  # decided, used or changed meanwhile: look again
                    continue
                if step.state != StepState.PENDING:
                    if approval is not None:
                        # Refused: never offered again.
                        approval_spent(lease=lease, approval=approval, step=step)
                    view = None  # refused: written the slow way; read it back
                    continue
                # Settled at once, the outcome is committed with the next step's record (one
                # commit per step), or before anything else this run writes or reads.
                outcome = step_perform(
                    lease=lease, step=step, tool=tools[step.tool], policy=policy, defer=True
                )
                performed += 1
                used = approval is not None
                view = None if reread else view.after(step, outcome, approval_used=used)
            case _:  # every move is performed above (mypy checks: a new one fails here)
                assert_never(move)


def _closing(
    task_id: UUID, rules: Rules | None, facts: TaskFacts, policy: Policy, now: datetime
) -> tuple[Call, int] | datetime | None:
    """The task's closing call (``Rules.closing``) to record now, with its harness retries so
    far; when to try it again, if the last could not be sent for a passing reason and its
    backoff has not passed; or None: none declared, or it was made (done, unknown and looked
    up, refused, or out of retries), and the task ends."""
    if rules is None:
        return None
    made = (
        Step.objects.filter(task_id=task_id, decision__harness=CLOSING)
        .order_by("-n")
        .values_list("n", flat=True)
        .first()
    )
    if made is None:
        closing = rules.closing(facts=facts)
        return None if closing is None else (closing, 0)
    last = next((s for s in facts.steps if s.n == made), None)
    if last is None or last.state != StepState.NOT_DONE or not last.transient or last.refusal:
        return None
    if last.retries >= len(policy.transient_retry_delays) or last.settled_at is None:
        return None
    due = last.settled_at + timedelta(seconds=policy.transient_retry_delays[last.retries])
    if due > now:
        return due
    # It provably never left: the same call again, as a new step with a new key.
    return Call(last.tool, last.args, raw={"harness": CLOSING, "of": last.n}), last.retries + 1


def _compensate(
    *,
    lease: Lease,
    facts: TaskFacts,
    tools: Mapping[str, Tool],
    policy: Policy,
    target: StepFact,
    retries: int,
) -> None:
    """Record the undo of ``target`` (the harness maps its evidence to the undo's
    arguments) and perform it, unless it was refused."""
    args = tools[target.tool].undo_args(target.args, target.evidence)
    step = step_record(
        lease=lease,
        decision=Call(target.undo_tool, args, raw={"harness": "undo", "of": target.n}),
        tools=tools,
        facts=facts,
        retries=retries,
        policy=policy,
        undo_of=target,
    )
    if step.state == StepState.PENDING:
        step_perform(lease=lease, step=step, tool=tools[target.undo_tool], policy=policy)


def _still_standing(
    *,
    lease: Lease,
    facts: TaskFacts,
    tools: Mapping[str, Tool],
    policy: Policy,
    now: datetime,
) -> bool:
    """Before relying on what the saga holds (charging for it), ask the providers whether it
    still stands. A lapsed effect hands the task to a person; a provider that cannot tell
    makes the task wait and ask again."""
    for fact in facts.steps:
        tool = tools.get(fact.tool)
        if fact.state != StepState.DONE or fact.offset or fact.offsets is not None or tool is None:
            continue
        try:
            stands = tool.standing(fact.args, fact.evidence)
        except Exception as exc:  # cannot tell: do not build on it yet
            effect_checked(lease=lease, fact=fact, stands=None, error=type(exc).__name__)
            delay = first_delay(policy)
            _wait(lease, until=now + timedelta(seconds=delay), why=f"news of step {fact.key}")
            return False
        if stands is None:
            continue
        effect_checked(lease=lease, fact=fact, stands=stands)
        if not stands:
            raise _Handover(
                Attention.EFFECT_LAPSED,
                f"step {fact.key} ({fact.tool}) no longer stands at the provider "
                f"({dict(fact.evidence)}); nothing more was done on top of it: re-plan, or "
                "compensate the saga",
            )
    return True


def _decide(lease: Lease, planner: Planner, facts: TaskFacts) -> Decision:
    """Ask the planner, under a lease stretched to cover its longest answer."""
    budget = planner.max_duration
    if budget > timedelta(0):
        # The usual lease on top, so the stretch never shortens it. A settlement held back
        # is written now, stretching the lease in the same statement: the truth is durable
        # while a model thinks, and a step still costs two writes, not three.
        stretch = budget.total_seconds() + float(settings.JOURNAL_LEASE_SECONDS)
        settle_held(lease, seconds=stretch)
    try:
        return planner.decide(facts)
    except Exception as exc:  # any planner failure: nothing was decided, a person looks
        raise _Handover(
            Attention.PLANNER_FAILED,
            f"the planner failed: {type(exc).__name__}: {str(exc)[:500]}",
        ) from exc


@dataclass(frozen=True)
class _Asked:
    """What the runner's pure decision asks (:class:`journal.moves.Ask`): reads of the journal
    and the answers of the task's rules, each made only when the decision turns on it."""

    task_id: UUID
    tools: Mapping[str, Tool]
    rules: Rules | None
    facts: TaskFacts

    def open_step(self) -> moves.OpenStep | None:
        step = task_open_step(task_id=self.task_id)
        if step is None:
            return None
        return moves.OpenStep(step, due=bool(step.due))  # type: ignore[attr-defined]

    def approval(self) -> moves.OpenApproval | None:
        approval = approval_open(task_id=self.task_id)
        if approval is None:
            return None
        return moves.OpenApproval(approval, expired=is_expired(approval))

    def holder(self, blocked: StepFact) -> datetime | bool | None:
        if not blocked.refused_by:
            return None  # it settled a moment before the refusal was written: decide again
        row = (
            Step.objects.filter(key=blocked.refused_by)
            .values_list("state", "next_check_at", "task__status")
            .first()
        )
        if row is None or row[0] not in LIVE_STATES:
            return None
        state, next_check_at, status = row
        if status not in (TaskStatus.RUNNABLE, TaskStatus.WAITING):
            return True  # with a person (or held): no lookup is coming at a known time
        return next_check_at or True

    def resumed_since(self, step: StepFact) -> bool:
        if step.settled_at is None:
            return False  # it settled in this very run (the runner's own view of it)
        return Entry.objects.filter(
            task_id=self.task_id,
            kind=EntryKind.OPERATOR_ACTION,
            data__action="resume",
            at__gt=step.settled_at,
        ).exists()

    def hold(self, call: Call) -> str | None:
        rules = self.rules
        if rules is None:
            return None
        reason = rules.hold(tool=call.tool, args=call.args, facts=self.facts)
        if reason is None:
            return None  # the usual case: checked once, as it is recorded
        # A call the rules refuse is recorded as refused: nobody is asked to approve it.
        checked = decision_check(decision=call, tools=self.tools, rules=rules, facts=self.facts)
        return None if checked.refused is not None else reason

    def verify_before(self, tool: str) -> bool:
        return self.rules is not None and self.rules.verify_before(tool=tool)


def _wait(lease: Lease, *, until: datetime, why: str) -> None:
    task_wait(lease=lease, until=until, reason=f"waiting for {why}")
