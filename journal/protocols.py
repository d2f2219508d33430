"""What the journal needs from the outside world, and nothing more.

The journal knows tools and planners only through these protocols; ``agentops`` implements
them (the Stripe-backed ``charge_customer``, the Anthropic planner, ...). Nothing here
imports a vendor SDK.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from django.db import models

from journal.outcomes import Observation, Outcome, StepState


class CostClass(models.TextChoices):
    """How much a duplicate would cost, and so how much care a call gets (DESIGN §9)."""

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
    def compensation(self) -> str | None:
        """The name of the tool that undoes this one, or None when nothing can (sagas)."""
        ...

    def validate(self, args: Mapping[str, Any]) -> list[str]:
        """Problems with the arguments, each a sentence; empty when they are valid."""
        ...

    def guard(self, args: Mapping[str, Any]) -> str | None:
        """The business object this effect acts on (``charge:INV-2291``), if any (DESIGN §6)."""
        ...

    def call(self, args: Mapping[str, Any], *, key: str) -> Observation: ...

    def lookup(self, args: Mapping[str, Any], *, key: str) -> Outcome | None: ...


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
    refused: bool = False
    """Not started because another effect on the same object was in flight or unknown."""

    def result_text(self) -> str:
        """The tool result as the model must read it (DESIGN §8): three states, no 'failed'."""
        what = f"{self.tool}" + (f" for {self.guard.split(':', 1)[-1]}" if self.guard else "")
        if self.state == StepState.DONE:
            return f"status: done — {what} happened; evidence: {dict(self.evidence)}"
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

    def decide(self, facts: TaskFacts) -> Decision: ...
