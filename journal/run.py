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
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import InterfaceError, InternalError, OperationalError, connection
from django.db.models.functions import Now

from journal.leases import Lease, LeaseLost, fence, lease_acquire, lease_release
from journal.models import (
    Approval,
    ApprovalState,
    Attention,
    Entry,
    EntryKind,
    Step,
    Task,
    TaskStatus,
)
from journal.outcomes import LIVE_STATES, Outcome, StepState
from journal.perform import step_perform, step_reconcile
from journal.policy import DEFAULT_POLICY, Policy
from journal.protocols import (
    CORRECTABLE,
    Call,
    Decision,
    Finish,
    Planner,
    Refusal,
    Rules,
    StepFact,
    TaskFacts,
    Tool,
)
from journal.record import TaskMoved, decision_check, step_record, task_finish
from journal.sagas import (
    ApprovalNotUsable,
    Undo,
    UndoFailed,
    UndoLater,
    approval_expire,
    approval_open,
    approval_request,
    approval_spent,
    effect_checked,
    is_expired,
    next_undo,
    saga_unwind,
)
from journal.selectors import task_facts, task_open_step
from journal.status import FINAL, task_flag, task_transition
from journal.summary import fell_short, task_summary


@dataclass(frozen=True)
class Advance:
    """Why the runner stopped: ``finished``, ``compensated``, ``cancelled``, ``waiting``,
    ``awaiting_approval``, ``needs_human`` or ``busy`` (another runner holds the task)."""

    stopped: str
    steps_performed: int = 0


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

    def __init__(self, task_id: UUID, *, released: bool) -> None:
        given = "gave its lease back" if released else "could not give its lease back"
        super().__init__(f"task {task_id}: the run lost its database and {given}")
        self.task_id, self.released = task_id, released


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
        return _run(lease=lease, planner=planner, tools=tools, policy=policy, rules=rules)
    except Exception as exc:
        if not _database_lost(exc):
            raise
        # Without this, the task would wait out its whole lease before anyone took it up.
        released = _give_back(lease, clean=False)
        raise DatabaseLost(lease.task_id, released=released) from exc


def task_unbuildable(*, task_id: UUID, owner: str, reason: str) -> Advance:
    """A run that could not even be built (its planner or its tools: an unknown setting, a
    missing key, an import that fails) hands its task to a person, under the task's lease,
    like any other failure, and counts as a failed run. A task that was not due to advance
    (over, held, waiting for later) is left as it is, and nothing is counted."""
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
        task_transition(
            lease=lease,
            task_id=task_id,
            to=TaskStatus.NEEDS_HUMAN,
            frm=[TaskStatus.RUNNABLE, TaskStatus.WAITING],
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
        task_flag(lease=lease, task_id=lease.task_id, code=code, reason=reason, release=True)
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
    performed = 0
    view: _View | None = None
    while True:
        if view is None or not view.current(lease):
            view = _View.load(lease)
        task, facts, now = view.task, view.facts, view.now
        if task.status in FINAL:
            return Advance(task.status, performed)
        if task.status == TaskStatus.NEEDS_HUMAN:
            return Advance("needs_human", performed)
        if task.status == TaskStatus.AWAITING_APPROVAL:
            return Advance("awaiting_approval", performed)
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
            view = None
            continue
        open_step = task_open_step(task_id=task.pk) if view.has_open_step else None
        if open_step is not None:
            # A pending step seen by a new lease holder was abandoned by a dead runner: it is
            # unknown, and reconciled at once. An unknown one waits for its lookup time. A
            # saga decides whether to compensate a step only once it is settled.
            if open_step.state == StepState.UNKNOWN and not open_step.due:  # type: ignore[attr-defined]
                _wait(lease, until=open_step.next_check_at or now, why=f"step {open_step.key}")
                return Advance("waiting", performed)
            step_reconcile(
                lease=lease, step=open_step, tool=tools.get(open_step.tool), policy=policy
            )
            performed += 1
            view = None
            continue
        if task.unwinding:
            try:
                stopped = _unwind(lease=lease, facts=facts, tools=tools, policy=policy, now=now)
            except TaskMoved:
                view = None  # changed meanwhile (a person cancelled it): look again
                continue
            if stopped is not None:
                return Advance(stopped, performed)
            performed += 1
            view = None
            continue
        if task.step_count >= policy.max_steps:
            raise _Handover(
                Attention.STEP_LIMIT,
                f"the task reached its limit of {policy.max_steps} steps without finishing",
            )
        approval: Approval | None = None
        decision: Decision
        # A decision the harness makes again by itself (never held again, never re-asked).
        harness_retry = False
        wrong = _misconfigured(facts, policy)
        blocked = _blocked(facts) if wrong is None else None
        retry = _transient_retry(facts, policy) if wrong is None and blocked is None else None
        if wrong is not None:
            if not _resumed_since(task.pk, wrong):
                raise _Handover(
                    Attention.MISCONFIGURED,
                    f"step {wrong.key} ({wrong.tool}): {wrong.detail}. Nothing happened. Fix "
                    "the configuration, then resume the task: the step is tried again",
                )
            # A person fixed what was wrong and resumed it: the same call, as a new step (the
            # first provably did nothing).
            decision = Call(wrong.tool, wrong.args, raw={"harness": "after_fix", "of": wrong.n})
            retries, harness_retry = wrong.retries + 1, True
        elif blocked is not None:
            holder_check = _live_holder(blocked)
            if holder_check is not None:
                _wait(
                    lease,
                    until=blocked_until(
                        refused_at=blocked.settled_at,
                        holder_next=holder_check,
                        now=now,
                        policy=policy,
                    ),
                    why=f"step {blocked.refused_by}, another effect on the same object, to settle",
                )
                return Advance("waiting", performed)
            # It settled: the same decision again, which the guard now judges by its outcome
            # (already done → refused with its evidence; not done → it goes ahead).
            decision = Call(
                blocked.tool, blocked.args, raw={"harness": "after_in_flight", "of": blocked.n}
            )
            retries, harness_retry = blocked.retries + 1, True
        elif retry is not None:
            last, due = retry
            if due > now:
                _wait(lease, until=due, why=f"a retry of step {last.key}")
                return Advance("waiting", performed)
            decision = Call(last.tool, last.args, raw={"harness": "retry", "of": last.n})
            retries, harness_retry = last.retries + 1, True
        else:
            failed = _saga_step_failed(facts) if rules is not None and rules.saga else None
            if failed is not None:
                saga_unwind(task_id=task.pk, reason=failed, lease=lease)
                view = None
                continue
            # Only a saga is ever held for approval: nothing to read for any other task.
            approval = approval_open(task_id=task.pk) if rules is not None and rules.saga else None
            if approval is not None and approval.state == ApprovalState.PENDING:
                # Resumed while a decision is still awaited: wait for it again.
                task_transition(
                    lease=lease,
                    task_id=task.pk,
                    to=TaskStatus.AWAITING_APPROVAL,
                    frm=[TaskStatus.RUNNABLE],
                    reason=approval.reason,
                    approval=approval.pk,
                )
                return Advance("awaiting_approval", performed)
            if approval is not None and is_expired(approval):
                approval_expire(approval=approval, actor="harness")
                approval = None
                view = None
            if approval is not None:
                # Exactly what the person approved: the planner is not asked again.
                decision = Call(
                    approval.tool,
                    approval.args,
                    raw={"harness": "approved", "approval": approval.pk},
                )
            else:
                decision = _decide(lease, planner, facts)
            retries = 0
        if isinstance(decision, Finish):
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
        if (
            rules is not None
            and approval is None
            and not harness_retry
            # A call the rules refuse is recorded as refused: nobody is asked to approve it.
            and decision_check(decision=decision, tools=tools, rules=rules, facts=facts).refused
            is None
        ):
            why = rules.hold(tool=decision.tool, args=decision.args, facts=facts)
            if why:
                approval_request(
                    lease=lease,
                    tool=decision.tool,
                    args=decision.args,
                    reason=why,
                    ttl=timedelta(seconds=policy.approval_ttl),
                )
                return Advance("awaiting_approval", performed)
        if (
            rules is not None
            and rules.verify_before(tool=decision.tool)
            and not _still_standing(lease=lease, facts=facts, tools=tools, policy=policy, now=now)
        ):
            return Advance("waiting", performed)
        try:
            step = step_record(
                lease=lease,
                decision=decision,
                tools=tools,
                rules=rules,
                facts=facts,
                retries=retries,
                policy=policy,
                approval=approval,
            )
        except (ApprovalNotUsable, TaskMoved):
            view = None  # decided, used or changed meanwhile: look again
            continue
        if step.state != StepState.PENDING:
            if approval is not None:
                approval_spent(approval=approval, step=step)  # refused: never offered again
            view = None  # refused: written the slow way; read it back
            continue
        outcome = step_perform(lease=lease, step=step, tool=tools[step.tool], policy=policy)
        performed += 1
        view = view.after(step, outcome, approval_used=approval is not None) if view else None


def _task_from_row(row: dict[str, Any]) -> Task:
    """A Task from a raw ``RETURNING journal_task.*`` row, converted as a query would (the
    driver hands jsonb over as text; JSONField parses it). Columns are the fields' names
    here: the task has no foreign keys."""
    for field in Task._meta.concrete_fields:
        convert = getattr(field, "from_db_value", None)
        if convert is not None and field.attname in row:
            row[field.attname] = convert(row[field.attname], None, connection)
    return Task(**row)


@dataclass
class _View:
    """The runner's picture of its task between its own writes: read once, then kept up to
    date from what it writes itself. Read again whenever a write of its own shows, by the
    task's version, that someone else wrote in between (a webhook, a person), or after
    anything but the plain record → call → settle of one step."""

    task: Task
    facts: TaskFacts
    now: datetime
    version: int
    seen_writes: int
    has_open_step: bool

    @classmethod
    def load(cls, lease: Lease) -> _View:
        if lease.task is not None:
            # The first read comes with the lease itself: its row, as taking it left it.
            row, lease.task = dict(lease.task), None
            now_ = row.pop("db_now")
            task = _task_from_row(row)
            task._state.adding, task._state.db = False, "default"
            task.db_now = now_  # type: ignore[attr-defined]
        else:
            task = Task.objects.annotate(db_now=Now()).get(pk=lease.task_id)
        facts = task_facts(task=task)
        return cls(
            task=task,
            facts=facts,
            now=task.db_now,  # type: ignore[attr-defined]
            version=task.version,
            seen_writes=len(lease.versions),
            has_open_step=any(
                s.state in (StepState.PENDING, StepState.UNKNOWN) for s in facts.steps
            ),
        )

    def current(self, lease: Lease) -> bool:
        """Whether every write since the read was this runner's own, one after the other."""
        mine = lease.versions[self.seen_writes :]
        if mine != list(range(self.version + 1, self.version + 1 + len(mine))):
            return False
        if mine:
            self.version, self.seen_writes = mine[-1], len(lease.versions)
        return True

    def after(self, step: Step, outcome: Outcome, *, approval_used: bool) -> _View | None:
        """The view once ``step`` settled with ``outcome``, or None to read it again."""
        if outcome.state not in (StepState.DONE, StepState.NOT_DONE) or approval_used:
            return None
        if outcome.data.get("transient"):
            return None  # its retry is timed from when it settled: read that back
        if getattr(step, "offsets_n", None) is not None:
            return None  # an undo: what it offsets changed too
        fact = StepFact(
            n=step.n,
            tool=step.tool,
            args=step.args,
            state=StepState(outcome.state),
            detail=outcome.detail,
            key=step.key,
            guard=step.guard,
            evidence=dict(outcome.data.get("evidence") or {}),
            retries=step.retries,
            undo_tool=step.undo_tool,
            misconfigured=bool(outcome.data.get("misconfigured")),
        )
        self.facts = replace(self.facts, steps=[*self.facts.steps, fact])
        self.task.step_count = step.n
        return self


def _saga_step_failed(facts: TaskFacts) -> str | None:
    """Why the saga cannot complete: its last step did not happen and will not by itself
    (not a passing failure being retried, not a refusal the planner can put right)."""
    if not facts.steps:
        return None
    last = facts.steps[-1]
    if last.state != StepState.NOT_DONE or last.refusal in CORRECTABLE:
        return None
    return f"step {last.key} ({last.tool}) did not happen: {last.detail}"


def _unwind(
    *,
    lease: Lease,
    facts: TaskFacts,
    tools: Mapping[str, Tool],
    policy: Policy,
    now: datetime,
) -> str | None:
    """One step of unwinding a saga; a reason to stop, or None to go on."""
    nxt = next_undo(facts.steps, policy)
    if nxt is None:
        task_finish(
            lease=lease,
            decision=Finish("compensated", raw={"harness": "unwound"}),
            summary="Compensated. " + task_summary(facts.steps),
            to=TaskStatus.COMPENSATED,
        )
        return "compensated"
    if isinstance(nxt, UndoFailed):
        last = nxt.last
        if last is None or not last.misconfigured:
            raise _Handover(Attention.COMPENSATION_FAILED, nxt.why)
        if not _resumed_since(lease.task_id, last):
            raise _Handover(
                Attention.MISCONFIGURED,
                f"{nxt.why}. The provider refused us, not the undo: fix the configuration, "
                "then resume the task: the undo is made again",
            )
        nxt = Undo(nxt.target, last.retries + 1)  # it provably did nothing: a new key
    if isinstance(nxt, UndoLater):
        if nxt.due > now:
            _wait(lease, until=nxt.due, why=f"a retry of the undo of step {nxt.target.key}")
            return "waiting"
        nxt = Undo(nxt.target, nxt.retries)
    target = nxt.target
    done_by, undo = tools.get(target.tool), tools.get(target.undo_tool)
    if done_by is None or undo is None:
        raise _Handover(
            Attention.TOOL_MISSING,
            f"step {target.key} must be undone by {target.undo_tool}, which this task cannot use",
        )
    args = done_by.undo_args(target.args, target.evidence)
    step = step_record(
        lease=lease,
        decision=Call(target.undo_tool, args, raw={"harness": "undo", "of": target.n}),
        tools=tools,
        facts=facts,
        retries=nxt.retries,
        policy=policy,
        undo_of=target,
    )
    if step.state == StepState.PENDING:
        step_perform(lease=lease, step=step, tool=undo, policy=policy)
    return None


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
            delay = _first_delay(policy)
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
        # The usual lease on top, so the stretch never shortens it.
        fence(lease, seconds=budget.total_seconds() + float(settings.JOURNAL_LEASE_SECONDS))
    try:
        return planner.decide(facts)
    except Exception as exc:  # any planner failure: nothing was decided, a person looks
        raise _Handover(
            Attention.PLANNER_FAILED,
            f"the planner failed: {type(exc).__name__}: {str(exc)[:500]}",
        ) from exc


def _misconfigured(facts: TaskFacts, policy: Policy) -> StepFact | None:
    """The last step, when it did not happen because the provider refused *us* (our key, our
    address): not the business's answer, so neither the planner nor a saga decides on it; a
    person fixes it. One that never left for a reason that may pass (a name that did not
    resolve) is first retried like any other."""
    if not facts.steps:
        return None
    last = facts.steps[-1]
    if last.state != StepState.NOT_DONE or not last.misconfigured or last.refusal:
        return None
    if last.transient and _transient_streak(facts) <= len(policy.transient_retry_delays):
        return None
    return last


def _resumed_since(task_id: UUID, step: StepFact) -> bool:
    """Whether a person resumed the task after ``step`` settled (having fixed something)."""
    if step.settled_at is None:
        return False  # it settled in this very run (the runner's own view of it)
    return Entry.objects.filter(
        task_id=task_id,
        kind=EntryKind.OPERATOR_ACTION,
        data__action="resume",
        at__gt=step.settled_at,
    ).exists()


def _blocked(facts: TaskFacts) -> StepFact | None:
    """The last step, when the guard refused it because another effect on the same object was
    in flight or unknown (docs/design.md §6): the task waits for that one to settle, then
    decides from its outcome. "Not until it is resolved", never "never"."""
    if not facts.steps:
        return None
    last = facts.steps[-1]
    return last if last.refusal == Refusal.IN_FLIGHT else None


def _live_holder(blocked: StepFact) -> datetime | bool | None:
    """Whether the step that stood in ``blocked``'s way is still open: its next lookup time,
    or True when none is coming at a known time (it is in flight, or its task is with a
    person), or None once it has settled."""
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


# The least a blocked task waits before it looks again (a policy with no delays would spin).
MIN_BLOCKED_WAIT = 0.05


def blocked_until(
    *,
    refused_at: datetime | None,
    holder_next: datetime | bool,
    now: datetime,
    policy: Policy,
) -> datetime:
    """When a task blocked by another task's live effect looks again: backing off — it waits
    as long as it has waited already, at least the first lookup delay and at most the last —
    and never before the holder's own next lookup (``holder_next``, or True when it has
    none: in flight, or with a person). Pure."""
    waited = (now - refused_at).total_seconds() if refused_at is not None else 0.0
    longest = max(policy.lookup_schedule) if policy.lookup_schedule else 1.0
    delay = min(max(_first_delay(policy), waited, MIN_BLOCKED_WAIT), max(longest, MIN_BLOCKED_WAIT))
    until = now + timedelta(seconds=delay)
    return max(until, holder_next) if isinstance(holder_next, datetime) else until


def _first_delay(policy: Policy) -> float:
    return policy.lookup_schedule[0] if policy.lookup_schedule else 1.0


def _transient_retry(facts: TaskFacts, policy: Policy) -> tuple[StepFact, datetime] | None:
    """The last step, when it did not happen for a passing reason and may be tried again."""
    if not facts.steps:
        return None
    last = facts.steps[-1]
    if last.state != StepState.NOT_DONE or not last.transient or last.refusal:
        return None
    tries = _transient_streak(facts)
    if tries > len(policy.transient_retry_delays) or last.settled_at is None:
        return None
    return last, last.settled_at + timedelta(seconds=policy.transient_retry_delays[tries - 1])


def _transient_streak(facts: TaskFacts) -> int:
    """How many times in a row, up to the last step, the same call could not be sent: the
    harness's retries of it so far, plus one (other re-issues do not count against it)."""
    last = facts.steps[-1]
    streak = 0
    for step in reversed(facts.steps):
        same = step.tool == last.tool and step.args == last.args
        if not (same and step.state == StepState.NOT_DONE and step.transient):
            break
        streak += 1
    return streak


def _wait(lease: Lease, *, until: datetime, why: str) -> None:
    task_transition(
        lease=lease,
        task_id=lease.task_id,
        to=TaskStatus.WAITING,
        frm=[TaskStatus.RUNNABLE],
        wake_at=until,
        reason=f"waiting for {why}",
        release=lease,
    )
