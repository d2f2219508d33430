"""What the journal needs from the outside world, and nothing more.

The journal knows tools and planners only through these protocols; ``agentops`` implements
them (the Stripe-backed ``charge_customer``, the Anthropic planner, ...). Nothing here
imports a vendor SDK.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from django.db import models

from journal.outcomes import Observation, Outcome, StepState

T = TypeVar("T")


class CostClass(models.TextChoices):
    """How much a duplicate would cost, and so how much care a call gets (docs/design.md §9)."""

    READ = "read", "read"
    """No effect: an unknown result is simply retried, a bounded number of times."""
    CHEAP = "cheap", "cheap effect"
    """Keyed, retried with its key while the key lives, never looked up."""
    FULL = "full", "full effect"
    """Payments, customer messages, orders, bookings: keyed, looked up, reconciled."""


class Tool(Protocol):
    """A tool with side effects, as the journal sees it.

    ``call`` must send exactly ``args`` with exactly ``key`` (as the provider's idempotency
    key, and somewhere the effect can be found by later: metadata, a message id, a
    reference) and report what it saw; it may raise, and anything it raises is
    ``unknown``. ``lookup`` finds the effect named by ``key``: an ``Outcome`` when the
    provider knows it (``done``, or ``not_done`` for a provably failed effect), ``None`` when
    it does not, and it may raise when it cannot tell.
    """

    @property
    def name(self) -> str: ...

    @property
    def cost(self) -> CostClass: ...

    @property
    def key_lifetime(self) -> timedelta:
        """How long the provider remembers keys (Stripe: 24 h). Retrying is safe only within it."""
        ...

    @property
    def lookup_lag(self) -> timedelta:
        """How long the provider's lookup may trail its writes (Stripe search: about a minute)."""
        ...

    @property
    def evidence(self) -> Sequence[str]:
        """What a done effect must carry to be believed (a charge id, a message id, a booking
        reference): a 2xx or a lookup without it proves nothing, and the step is unknown."""
        ...

    @property
    def compensation(self) -> str | None:
        """The name of the tool that undoes this one, or None when nothing can (sagas)."""
        ...

    @property
    def irreversible(self) -> bool:
        """Nothing can undo it (an email, a wire): in a saga it comes after every step that
        might fail (§7)."""
        ...

    def undo_args(self, args: Mapping[str, Any], evidence: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments of this effect's compensation, from its frozen arguments and the
        evidence of what it did (a hold's id → the release). Decided by code, never a model."""
        ...

    def standing(self, args: Mapping[str, Any], evidence: Mapping[str, Any]) -> bool | None:
        """Whether the effect still stands at the provider (a flight hold may expire on its
        own); ``None`` when it cannot lapse. Raising means "cannot tell"."""
        ...

    def validate(self, args: Mapping[str, Any]) -> list[str]:
        """Problems with the arguments, each a sentence; empty when they are valid."""
        ...

    def guard(self, args: Mapping[str, Any]) -> str | None:
        """The business object this effect acts on (``charge:INV-2291``), if any (§6)."""
        ...

    def once(self, args: Mapping[str, Any]) -> bool:
        """Whether the effect happens once per object (the charge of an invoice, reminder N):
        a second one is refused while the first stands and is not undone (§6)."""
        ...

    def call(self, args: Mapping[str, Any], *, key: str) -> Observation: ...

    def lookup(self, args: Mapping[str, Any], *, key: str) -> Outcome | None: ...


class Refusal(models.TextChoices):
    """Why a decision was recorded ``not_done`` without anything being sent."""

    UNKNOWN_TOOL = "unknown_tool", "unknown tool"
    """The tool does not exist, or this task's kind may not use it."""
    INVALID_ARGUMENTS = "invalid_arguments", "invalid arguments"
    """The arguments do not fit the tool's schema."""
    NOT_THIS_TASKS = "not_this_tasks", "not this task's"
    """An argument is not what the task's references say (amount, invoice, recipient, ...),
    or an undo names an effect this task did not make."""
    LIMIT = "limit", "over a limit"
    """It would exceed a limit of the task (money per currency)."""
    ORDER = "order", "out of order"
    """An irreversible step of a saga, while a step that might fail could still follow."""
    IN_FLIGHT = "in_flight", "in flight"
    """Another effect on the same object is in flight or unknown."""
    ALREADY_DONE = "already_done", "already done"
    """The object's once-only effect already happened and was not undone."""


GUARD_REFUSALS = (Refusal.IN_FLIGHT, Refusal.ALREADY_DONE)
# Refusals of a decision's form, not its substance: deciding again, correctly, is fine.
DECIDE_AGAIN = (Refusal.UNKNOWN_TOOL, Refusal.INVALID_ARGUMENTS)
# Refusals a model can put right by deciding differently; any other refusal of a saga step
# means the step cannot happen, and the saga unwinds.
CORRECTABLE = (*DECIDE_AGAIN, Refusal.NOT_THIS_TASKS, Refusal.ORDER)


@dataclass(frozen=True)
class Refused:
    """The harness's rules refuse a decision: ``reason`` is one sentence for the model, saying
    what it may do instead."""

    code: Refusal
    reason: str
    facts: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Bound:
    """The decision belongs to the task. ``offsets`` names the step (its ``n``) of this task
    that the call undoes, when it is a refund, a release or a cancel."""

    offsets: int | None = None


# The raw decision of a task's closing call (``Rules.closing``): ``{"harness": CLOSING}``, by
# which the runner knows it was made.
CLOSING = "closing"


class Rules(Protocol):
    """What binds a task's decisions to the task (docs/design.md §6, §7): the harness knows
    what the task is for; the model may be wrong or prompt-injected."""

    def check(self, *, tool: str, args: Mapping[str, Any], facts: TaskFacts) -> Refused | Bound:
        """Whether the call belongs to the task; an undo names the step it undoes."""
        ...

    @property
    def saga(self) -> bool:
        """Whether the task's effects belong together: when one cannot happen, the harness
        compensates the done ones, newest first."""
        ...

    def hold(self, *, tool: str, args: Mapping[str, Any], facts: TaskFacts) -> str | None:
        """Why a person must approve this call before it is recorded, or None."""
        ...

    def verify_before(self, *, tool: str) -> bool:
        """Whether the effects the task holds must be seen to stand before this call."""
        ...

    def closing(self, *, facts: TaskFacts) -> Call | None:
        """The call the harness makes once the task's done effects are undone, before it ends
        compensated (a message to the customer that their trip was cancelled, their payment
        refunded), or None: made once, keyed like any step, never decided by the model."""
        ...


@dataclass(frozen=True)
class StepFact:
    """One earlier step as the journal knows it: what the planner is shown, never its memory."""

    n: int
    tool: str
    args: Mapping[str, Any]
    state: StepState
    detail: str
    key: str
    guard: str | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)
    refusal: str = ""
    """Why it was refused without running (a :class:`Refusal`), or "" when it was not."""
    offset: bool = False
    """It was done and a later done step of the task undid it."""
    offsets: int | None = None
    """The ``n`` of the step this one undoes."""
    retries: int = 0
    """Harness retries of a transient ``not_done`` that came before this step."""
    undo_tool: str = ""
    """The tool that undoes it, declared when it was recorded ("" when none)."""
    transient: bool = False
    """``not_done`` for a passing reason (the provider could not be reached): worth a retry."""
    settled_at: datetime | None = None
    refused_by: str = ""
    """For a guard's refusal: the key of the step that stood in its way ("" when unknown)."""
    first_evidence: Mapping[str, Any] = field(default_factory=dict)
    """For an "already done" refusal: the evidence of the effect that was done first."""
    misconfigured: bool = False
    """``not_done`` because the provider refused *us* (a key, an address), not the action."""

    @property
    def refused(self) -> bool:
        """Not started because of the object's guard: another effect is live, or done."""
        return self.refusal in GUARD_REFUSALS

    def result_text(self) -> str:
        """The tool result as the model must read it (§8): three states, never 'failed'."""
        what = f"{self.tool}" + (f" for {self.guard.split(':', 1)[-1]}" if self.guard else "")
        if self.state == StepState.DONE:
            undone = "; it was undone later" if self.offset else ""
            return f"status: done — {what} happened; evidence: {dict(self.evidence)}{undone}"
        if self.state == StepState.NOT_DONE and self.refusal in DECIDE_AGAIN:
            return f"status: not_done — {what} was not started: {self.detail}; safe to decide again"
        if self.state == StepState.NOT_DONE and self.refusal:
            # The reason says what to do instead; "decide again" would invite a repeat.
            return f"status: not_done — {what} was not started: {self.detail}"
        if self.state == StepState.NOT_DONE:
            return f"status: not_done — {what} did not happen: {self.detail}; safe to decide again"
        return (
            f"status: unknown — {what}: {self.detail}; checking (reference {self.key}); do not "
            f"start another {self.tool}" + (" for this object" if self.guard else "") + " meanwhile"
        )


@dataclass(frozen=True)
class TaskFacts:
    task_id: str
    kind: str
    goal: str
    refs: Mapping[str, Any]
    steps: Sequence[StepFact]
    plan: Sequence[Mapping[str, Any]] = ()
    """A saga's plan: its steps' tools in order, each perhaps marked ``hold``."""
    _folds: dict[Hashable, tuple[int, Any]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """What :meth:`fold` has computed, by name: how many steps it had folded, and the result.
    Not an argument, so ``dataclasses.replace`` starts it afresh."""

    def fold(self, name: Hashable, add: Callable[[T, StepFact], T], start: T) -> T:
        """``add`` folded over the steps in order from ``start``, for a question asked at
        every step (how much money is committed, whether any step is live): remembered under
        ``name``, so facts made by :meth:`appended` fold only the steps added since, and the
        question costs the thousandth step what it cost the first. ``name`` must say
        everything ``add`` and ``start`` depend on."""
        n, found = self._folds.get(name, (0, start))
        acc: T = found
        for step in self.steps[n:]:
            acc = add(acc, step)
        self._folds[name] = (len(self.steps), acc)
        return acc

    def appended(self, step: StepFact) -> TaskFacts:
        """These facts with one more step after the others: what was folded over the steps
        before it carries over (they are the same steps, unchanged)."""
        facts = replace(self, steps=[*self.steps, step])
        facts._folds.update(self._folds)
        return facts


@dataclass(frozen=True)
class Call:
    """The planner decided to call ``tool`` with ``args``. ``raw`` is kept for audit."""

    tool: str
    args: Mapping[str, Any]
    raw: Any = None


@dataclass(frozen=True)
class Finish:
    """The planner decided the task is over."""

    summary: str
    raw: Any = None


Decision = Call | Finish


class Planner(Protocol):
    """Turns the journal's facts about a task into its next decision."""

    @property
    def max_duration(self) -> timedelta:
        """The longest one decision may take, retries included: the runner's lease is stretched
        to cover it, so a slow model does not hand the task to a second runner."""
        ...

    def decide(self, facts: TaskFacts) -> Decision: ...
