"""The runner's next move: a pure decision from what it knows of its task (docs/design.md §7).

:func:`next_move` is what the runner (``journal/run.py``) decides each time round its loop,
from the task's row (status, wake-up time, whether it unwinds, its step count), its facts,
the clock and the policy. Asking the planner is one of its answers; what to do with the
planner's decision (finish, hold it for a person, record it) is :func:`on_decision`'s. The
runner then performs the move under its lease. Each move is one of a closed set.

Like :func:`journal.outcomes.classify` and :func:`journal.reconcile.reconcile_next`, this
module touches no database and calls no planner. What it must know beyond the row and the
facts (the open step's row, an approval, whether a person resumed the task, what the task's
rules say about a call) it asks through :class:`Ask`, and only when its decision turns on
it: the runner reads exactly what its decision needs, and a plain step costs its two
statements and not a read more (tests/journal/test_cost.py).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from journal import protocols
from journal.keys import same_object
from journal.models import Approval, ApprovalState, Attention, Step, TaskStatus
from journal.outcomes import LIVE_STATES, StepState
from journal.policy import Policy
from journal.protocols import CORRECTABLE, Call, Decision, Refusal, StepFact, TaskFacts
from journal.sagas import Undo, UndoFailed, UndoLater, next_undo
from journal.status import FINAL

# --- What the decision is made from ---------------------------------------------------------


@dataclass(frozen=True)
class TaskRow:
    """What the decision needs of the task's own row."""

    status: str
    wake_at: datetime | None
    unwinding: bool
    step_count: int


@dataclass(frozen=True)
class OpenStep:
    """The task's step in flight or unknown, as read, and whether its lookup time has come
    (by the database's clock; a step nobody scheduled is due)."""

    step: Step
    due: bool


@dataclass(frozen=True)
class OpenApproval:
    """The saga's approval that is pending, or approved and not used yet, and whether it
    expired (by the database's clock when it was read)."""

    approval: Approval
    expired: bool


class Ask(Protocol):
    """What :func:`next_move` and :func:`on_decision` may ask beyond the task's row and facts;
    each question is asked only when the decision turns on it."""

    def open_step(self) -> OpenStep | None:
        """The open step's row; asked only when the facts show one open."""
        ...

    def approval(self) -> OpenApproval | None:
        """The saga's open approval; asked only of a saga that would go forward."""
        ...

    def holder(self, blocked: StepFact) -> datetime | bool | None:
        """Whether the step that stood in ``blocked``'s way is still open: its next lookup
        time, or True when none is coming at a known time (in flight, or its task is with a
        person), or None once it has settled."""
        ...

    def resumed_since(self, step: StepFact) -> bool:
        """Whether a person resumed the task after ``step`` settled (having fixed something)."""
        ...

    def hold(self, call: Call) -> str | None:
        """Why the task's rules hold ``call`` for a person, or None (also when the rules
        refuse it: nobody is asked to approve what would be refused)."""
        ...

    def verify_before(self, tool: str) -> bool:
        """Whether the effects the task holds must be seen to stand before ``tool`` is called."""
        ...


# --- The moves ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stop:
    """Nothing to do now: the task is over (``finished``, ``compensated``, ``cancelled``),
    with a person (``needs_human``, ``awaiting_approval``), or waiting for later
    (``waiting``). ``reason`` is what the run says it stopped at."""

    reason: str


@dataclass(frozen=True)
class WakeUp:
    """A waiting task whose time came: make it runnable, then decide again."""


@dataclass(frozen=True)
class Wait:
    """Make the task wait until ``until`` (for ``why``) and end the run."""

    until: datetime
    why: str


@dataclass(frozen=True)
class Reconcile:
    """One round for the open step (docs/design.md §5), then decide again."""

    step: Step


@dataclass(frozen=True)
class Unwind:
    """The saga cannot complete (``reason``): from now on it compensates."""

    reason: str


@dataclass(frozen=True)
class Compensate:
    """Record and perform the undo of ``target`` (``retries``: harness retries of its undo
    before this one)."""

    target: StepFact
    retries: int


@dataclass(frozen=True)
class Compensated:
    """Every done effect of the unwinding saga is undone: it ends ``compensated``."""


@dataclass(frozen=True)
class HandOver:
    """The harness cannot go on alone: hand the task to a person, with a code and a sentence."""

    code: Attention
    reason: str


@dataclass(frozen=True)
class Retry:
    """A decision the harness makes again by itself, as a new step — after a passing
    failure's backoff, once a blocking effect settled, after a person fixed our
    configuration. Never held again, never re-asked. ``verify_first``: the effects the saga
    holds must be seen to stand first."""

    call: Call
    retries: int
    verify_first: bool = False


@dataclass(frozen=True)
class AwaitApproval:
    """Resumed while a person's decision on ``approval`` is still awaited: wait for it again."""

    approval: Approval


@dataclass(frozen=True)
class AskPlanner:
    """Ask the planner for the next decision, then :func:`on_decision`. ``expire``: an
    approval that ran out, marked expired first (the saga asks anew)."""

    expire: Approval | None = None


@dataclass(frozen=True)
class Hold:
    """Hold the saga before ``call`` until a person approves it (``reason``: why)."""

    call: Call
    reason: str


@dataclass(frozen=True)
class Record:
    """Record ``call`` as a step and perform it. ``approval``: the person's approval it
    carries out (the planner was not asked again). ``verify_first`` as for :class:`Retry`."""

    call: Call
    approval: Approval | None = None
    verify_first: bool = False


@dataclass(frozen=True)
class Finish:
    """The planner decided the task is over: it ends ``finished``."""

    decision: protocols.Finish


Move = (
    Stop
    | WakeUp
    | Wait
    | Reconcile
    | Unwind
    | Compensate
    | Compensated
    | HandOver
    | Retry
    | AwaitApproval
    | AskPlanner
    | Hold
    | Record
    | Finish
)


# --- The decision ---------------------------------------------------------------------------


def _live(count: int, step: StepFact) -> int:
    """How many steps are pending or unknown, with ``step``."""
    return count + (step.state in LIVE_STATES)


def next_move(
    *,
    task: TaskRow,
    facts: TaskFacts,
    now: datetime,
    policy: Policy,
    saga: bool,
    tools: Collection[str],
    ask: Ask,
) -> Move:
    """What the runner does next, in this order: a task that is not runnable stops (or wakes
    up); an open step is reconciled (or waited for); an unwinding saga compensates; the step
    limit hands the task over; a step the provider refused because of us goes to a person
    (or, once they resumed it, is made again); a step blocked by another effect on its object
    waits for it, then is made again; a passing failure is retried after its backoff; a saga
    whose step cannot happen unwinds, one held for a person waits for them, one approved
    records exactly what was approved; otherwise the planner is asked. ``tools`` are the
    names of the tools this run can use."""
    if task.status in FINAL:
        return Stop(task.status)
    if task.status == TaskStatus.NEEDS_HUMAN:
        return Stop("needs_human")
    if task.status == TaskStatus.AWAITING_APPROVAL:
        return Stop("awaiting_approval")
    if task.status == TaskStatus.WAITING:
        if task.wake_at is not None and task.wake_at > now:
            return Stop("waiting")
        return WakeUp()
    opened = ask.open_step() if facts.fold("live", _live, 0) else None
    if opened is not None:
        # A pending step seen by a new lease holder was abandoned by a dead runner: it is
        # unknown, and reconciled at once. An unknown one waits for its lookup time. A saga
        # decides whether to compensate a step only once it is settled.
        step = opened.step
        if step.state == StepState.UNKNOWN and not opened.due:
            return Wait(step.next_check_at or now, f"step {step.key}")
        return Reconcile(step)
    if task.unwinding:
        return _unwinding(facts=facts, now=now, policy=policy, tools=tools, ask=ask)
    if task.step_count >= policy.max_steps:
        return HandOver(
            Attention.STEP_LIMIT,
            f"the task reached its limit of {policy.max_steps} steps without finishing",
        )
    wrong = _misconfigured(facts, policy)
    if wrong is not None:
        if not ask.resumed_since(wrong):
            return HandOver(
                Attention.MISCONFIGURED,
                f"step {wrong.key} ({wrong.tool}): {wrong.detail}. Nothing happened. Fix "
                "the configuration, then resume the task: the step is tried again",
            )
        # A person fixed what was wrong and resumed it: the same call, as a new step (the
        # first provably did nothing).
        return _retry(wrong, "after_fix", ask)
    blocked = _blocked(facts)
    if blocked is not None:
        holder_next = ask.holder(blocked)
        if holder_next is not None:
            return Wait(
                blocked_until(
                    refused_at=blocked.settled_at, holder_next=holder_next, now=now, policy=policy
                ),
                f"step {blocked.refused_by}, another effect on the same object, to settle",
            )
        # It settled: the same decision again, which the guard now judges by its outcome
        # (already done → refused with its evidence; not done → it goes ahead).
        return _retry(blocked, "after_in_flight", ask)
    retry = _transient_retry(facts, policy)
    if retry is not None:
        last, due = retry
        if due > now:
            return Wait(due, f"a retry of step {last.key}")
        return _retry(last, "retry", ask)
    if saga:
        failed = _saga_step_failed(facts)
        if failed is not None:
            return Unwind(failed)
        # Only a saga is ever held for approval: nothing to ask for any other task.
        held = ask.approval()
        if held is not None and held.approval.state == ApprovalState.PENDING:
            return AwaitApproval(held.approval)
        if held is not None and held.expired:
            return AskPlanner(expire=held.approval)
        if held is not None:
            # Exactly what the person approved: the planner is not asked again.
            approval = held.approval
            call = Call(
                approval.tool, approval.args, raw={"harness": "approved", "approval": approval.pk}
            )
            return Record(call, approval, verify_first=ask.verify_before(call.tool))
    return AskPlanner()


def on_decision(decision: Decision, *, ask: Ask) -> Finish | Hold | Record:
    """What the runner does with the planner's decision: finish; hold it for a person when
    the task's rules say so; otherwise record it."""
    if isinstance(decision, protocols.Finish):
        return Finish(decision)
    why = ask.hold(decision)
    if why:
        return Hold(decision, why)
    return Record(decision, verify_first=ask.verify_before(decision.tool))


def _retry(last: StepFact, why: str, ask: Ask) -> Retry:
    call = Call(last.tool, last.args, raw={"harness": why, "of": last.n})
    return Retry(call, last.retries + 1, verify_first=ask.verify_before(call.tool))


def _unwinding(
    *, facts: TaskFacts, now: datetime, policy: Policy, tools: Collection[str], ask: Ask
) -> Move:
    """One move of a saga that compensates: undo the newest done effect, wait to retry an
    undo that could not be sent, or give up to a person; compensated when nothing is left."""
    nxt = next_undo(facts.steps, policy)
    if nxt is None:
        return Compensated()
    if isinstance(nxt, UndoFailed):
        last = nxt.last
        if last is None or not last.misconfigured:
            return HandOver(Attention.COMPENSATION_FAILED, nxt.why)
        if not ask.resumed_since(last):
            return HandOver(
                Attention.MISCONFIGURED,
                f"{nxt.why}. The provider refused us, not the undo: fix the configuration, "
                "then resume the task: the undo is made again",
            )
        nxt = Undo(nxt.target, last.retries + 1)  # it provably did nothing: a new key
    if isinstance(nxt, UndoLater):
        if nxt.due > now:
            return Wait(nxt.due, f"a retry of the undo of step {nxt.target.key}")
        nxt = Undo(nxt.target, nxt.retries)
    target = nxt.target
    if target.tool not in tools or target.undo_tool not in tools:
        return HandOver(
            Attention.TOOL_MISSING,
            f"step {target.key} must be undone by {target.undo_tool}, which this task cannot use",
        )
    return Compensate(target, nxt.retries)


# --- The facts it turns on (pure) -----------------------------------------------------------


def _saga_step_failed(facts: TaskFacts) -> str | None:
    """Why the saga cannot complete: its last step did not happen and will not by itself
    (not a passing failure being retried, not a refusal the planner can put right)."""
    if not facts.steps:
        return None
    last = facts.steps[-1]
    if last.state != StepState.NOT_DONE or last.refusal in CORRECTABLE:
        return None
    if last.refusal and _repeats_own_effect(facts, last):
        # The model asked again for what this saga already did (its context was cleared,
        # it rephrased): the refusal says "done", not "cannot happen". Nothing to undo for
        # it; the planner is asked again, knowing.
        return None
    return f"step {last.key} ({last.tool}) did not happen: {last.detail}"


def _repeats_own_effect(facts: TaskFacts, refused: StepFact) -> bool:
    """Whether a refused call asked for an effect this task already made and still holds:
    refused because the object's once-only effect stands with this task's own step, or the
    same tool on the same object (or with the same arguments) as a done step of its own."""
    own = [
        s
        for s in facts.steps
        if s.n != refused.n
        and s.state == StepState.DONE
        and not s.offset
        and s.tool == refused.tool
    ]
    if refused.refused_by and any(s.key == refused.refused_by for s in own):
        return True
    return any(
        s.args == refused.args
        or (
            refused.guard is not None
            and s.guard is not None
            and same_object(s.guard, refused.guard)
        )
        for s in own
    )


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


def _blocked(facts: TaskFacts) -> StepFact | None:
    """The last step, when the guard refused it because another effect on the same object was
    in flight or unknown (docs/design.md §6): the task waits for that one to settle, then
    decides from its outcome. "Not until it is resolved", never "never"."""
    if not facts.steps:
        return None
    last = facts.steps[-1]
    return last if last.refusal == Refusal.IN_FLIGHT else None


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
    delay = min(max(first_delay(policy), waited, MIN_BLOCKED_WAIT), max(longest, MIN_BLOCKED_WAIT))
    until = now + timedelta(seconds=delay)
    return max(until, holder_next) if isinstance(holder_next, datetime) else until


def first_delay(policy: Policy) -> float:
    """The first lookup delay: how long to wait before asking again about what cannot be
    told yet."""
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
