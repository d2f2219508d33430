"""What to do about an open step, from its own record: the table (journal/reconcile.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from journal.models import Attention
from journal.outcomes import StepState
from journal.protocols import CostClass
from journal.reconcile import Next, next_check_in, reconcile_next

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
LATER, EARLIER = NOW + timedelta(hours=1), NOW - timedelta(hours=1)


@pytest.mark.parametrize(
    ("found", "cost", "trusted", "lookup", "attempts", "rounds", "expected"),
    [
        # Found: settle, whatever else is true.
        (StepState.DONE, CostClass.FULL, EARLIER, EARLIER, 9, 9, Next.SETTLE),
        (StepState.NOT_DONE, CostClass.FULL, LATER, LATER, 1, 0, Next.SETTLE),
        # Not found (or the lookup could not tell) and the key is trusted: retry, same key.
        (None, CostClass.FULL, LATER, LATER, 1, 0, Next.RETRY),
        (StepState.UNKNOWN, CostClass.FULL, LATER, LATER, 1, 0, Next.RETRY),
        (None, CostClass.CHEAP, LATER, LATER, 3, 2, Next.RETRY),
        # The key is dead: never a retry. Look again while a lookup may still lag...
        (None, CostClass.FULL, EARLIER, LATER, 1, 0, Next.WAIT),
        # ... unless the rounds are used up, or the lag is over, or nothing can be looked up.
        (None, CostClass.FULL, EARLIER, LATER, 1, 3, Next.HUMAN),
        (None, CostClass.FULL, EARLIER, EARLIER, 1, 0, Next.HUMAN),
        (None, CostClass.CHEAP, EARLIER, LATER, 1, 0, Next.HUMAN),
        # A step recorded without deadlines is treated as having a dead key.
        (None, CostClass.FULL, None, None, 1, 0, Next.HUMAN),
        # Reads are retried a bounded number of times, keys or not.
        (None, CostClass.READ, EARLIER, EARLIER, 2, 0, Next.RETRY),
        (None, CostClass.READ, LATER, LATER, 3, 0, Next.HUMAN),
    ],
)
def test_the_next_step_of_reconciliation(
    found: StepState | None,
    cost: CostClass,
    trusted: datetime | None,
    lookup: datetime | None,
    attempts: int,
    rounds: int,
    expected: Next,
) -> None:
    verdict = reconcile_next(
        found=found,
        cost=cost,
        now=NOW,
        key_trusted_until=trusted,
        lookup_until=lookup,
        attempts=attempts,
        read_attempts=3,
        rounds_done=rounds,
        rounds_planned=3,
    )
    assert verdict.next == expected
    if expected == Next.HUMAN:
        assert verdict.code in (Attention.KEY_DEAD, Attention.ROUNDS_EXHAUSTED) and verdict.why


def test_the_schedule_gives_each_round_its_wait_then_none() -> None:
    schedule = (1.0, 2.0, 5.0)
    assert [next_check_in(rounds_done=n, schedule=schedule) for n in range(4)] == [
        1.0,
        2.0,
        5.0,
        None,
    ]
