"""Pure pieces of the runner's decisions, by table (journal/run.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from journal.policy import Policy
from journal.run import MIN_BLOCKED_WAIT, blocked_until

NOW = datetime(2027, 1, 1, 12, 0, tzinfo=UTC)
POLICY = Policy(lookup_schedule=(1.0, 5.0, 60.0))


@pytest.mark.parametrize(
    ("waited", "holder_next", "expected"),
    [
        (0.0, True, 1.0),  # just refused: the first lookup delay
        (3.0, True, 3.0),  # waited 3 s already: as long again
        (500.0, True, 60.0),  # never longer than the last delay
        (0.0, NOW + timedelta(seconds=30), 30.0),  # never before the holder's own lookup
        (100.0, NOW + timedelta(seconds=10), 60.0),
    ],
)
def test_a_blocked_task_backs_off(waited: float, holder_next: object, expected: float) -> None:
    until = blocked_until(
        refused_at=NOW - timedelta(seconds=waited),
        holder_next=holder_next,  # type: ignore[arg-type]
        now=NOW,
        policy=POLICY,
    )
    assert (until - NOW).total_seconds() == pytest.approx(expected)


def test_a_policy_without_delays_still_never_spins() -> None:
    until = blocked_until(
        refused_at=NOW, holder_next=True, now=NOW, policy=Policy(lookup_schedule=(0.0,))
    )
    assert (until - NOW).total_seconds() == MIN_BLOCKED_WAIT
