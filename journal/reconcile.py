"""What to do next about an open step: a pure decision from the step's own record (§5).

Everything it needs was frozen on the step when it was recorded (its cost class, until when
its key is trusted, until when a lookup may still trail an effect) or counted since (its
attempts and reconciliation rounds). Today's settings never change the verdict about
yesterday's step. Like :func:`journal.outcomes.classify`, this module touches no database.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from journal.models import Attention
from journal.outcomes import SETTLED_STATES, StepState
from journal.protocols import CostClass


class Next(StrEnum):
    SETTLE = "settle"
    """The lookup found the effect (or its refusal): settle the step with what was found."""
    RETRY = "retry"
    """Not found and retrying is safe (the key is alive, or it is a read): send it again,
    same key, same arguments."""
    WAIT = "wait"
    """Not found, the key is dead, and the provider's lookup may still lag: look again later."""
    HUMAN = "human"
    """Nothing more can be done safely by the harness."""


@dataclass(frozen=True)
class Verdict:
    next: Next
    code: Attention | None = None
    why: str = ""


def reconcile_next(
    *,
    found: StepState | None,
    cost: str,
    now: datetime,
    key_trusted_until: datetime | None,
    lookup_until: datetime | None,
    attempts: int,
    read_attempts: int,
    rounds_done: int,
    rounds_planned: int,
) -> Verdict:
    """One round of reconciliation: what the lookup found (``None``: nothing, or it could not
    tell) decides, then the key's life, then the schedule."""
    if found in SETTLED_STATES:
        return Verdict(Next.SETTLE)
    if cost == CostClass.READ:
        if attempts < read_attempts:
            return Verdict(Next.RETRY)
        return Verdict(
            Next.HUMAN,
            Attention.ROUNDS_EXHAUSTED,
            f"the read did not complete in {attempts} attempts",
        )
    if key_trusted_until is not None and now < key_trusted_until:
        return Verdict(Next.RETRY)
    may_lag = cost == CostClass.FULL and lookup_until is not None and now < lookup_until
    if may_lag and rounds_done < rounds_planned:
        return Verdict(Next.WAIT)
    return Verdict(
        Next.HUMAN,
        Attention.KEY_DEAD,
        "the provider no longer remembers its key, and no lookup found it: a person must "
        "check with the provider",
    )


def next_check_in(*, rounds_done: int, schedule: tuple[float, ...]) -> float | None:
    """Seconds until the next reconciliation round, or ``None`` when the rounds are used up."""
    return schedule[rounds_done] if rounds_done < len(schedule) else None
