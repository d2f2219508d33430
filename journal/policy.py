"""The knobs of the journal, in one value passed to its services (tests shrink them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Policy:
    lookup_schedule: tuple[float, ...] = (1.0, 2.0, 5.0, 15.0, 30.0, 60.0, 120.0)
    """Seconds to wait before each reconciliation round of an unknown step: the first entry
    after the step went unknown, the next after the first round, and so on. When every
    round has been used and the step is still unknown, the task needs a human."""
    key_margin: float = 0.1
    """The fraction of a tool's key lifetime not trusted: a retry that would land near the
    end of the provider's memory is not made. Frozen on each step when it is recorded."""
    read_attempts: int = 3
    """Reads are simply retried, this many attempts in all."""
    max_steps: int = 50
    """A task that has recorded this many steps without finishing needs a human."""
    transient_retry_delays: tuple[float, ...] = (1.0, 5.0, 30.0)
    """A ``not_done`` for a passing reason (the provider was unreachable) is tried again by
    the harness as a new step with the same arguments, after each of these delays in turn;
    then the planner decides with the facts."""
    max_failed_runs: int = 5
    """Runs in a row that may end without finishing cleanly before the task needs a human."""
    approval_ttl: float = 3 * 24 * 3600.0
    """Seconds a held saga's request for approval stays valid (a weekend, and a day)."""


DEFAULT_POLICY = Policy()
