"""The deadlines a person deciding about a task is up against: a held step's approval expires,
and the effects already done that it builds on may lapse at their provider on their own (a
hold's ``expires_at`` in its evidence) — often much sooner. Whichever comes first is what the
pages show first; a lapse soon, or before the approval's own expiry, is a warning.

Which evidence fields are deadlines is said by their names, not by any app's domain."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from agentops.operators.readable import as_instant, relative
from journal.models import Approval, Step, StepKind
from journal.outcomes import StepState

# An evidence field named so says when the effect lapses at its provider.
DEADLINE_FIELDS = ("expires_at", "expires", "expiry", "expiration", "deadline", "valid_until")
# A lapse this close is a warning even when the approval would expire later still.
SOON = timedelta(minutes=30)


@dataclass(frozen=True)
class Deadline:
    at: datetime
    what: str
    """What lapses then, in words."""
    n: int | None = None
    """The step whose effect lapses (None: the approval itself)."""
    field: str = ""
    """The evidence's field that says so (``expires_at``)."""
    subject: str = "this approval"

    def relative(self, now: datetime) -> str:
        return relative(self.at, now)


@dataclass(frozen=True)
class Deadlines:
    """Every deadline of a held step, earliest first, and whether to warn."""

    items: tuple[Deadline, ...] = ()
    now: datetime | None = None

    @property
    def first(self) -> Deadline | None:
        return self.items[0] if self.items else None

    @property
    def approval(self) -> Deadline | None:
        return next((d for d in self.items if d.n is None), None)

    @property
    def lapsed(self) -> list[Deadline]:
        """Effects that have lapsed already (the approval's expiry aside)."""
        if self.now is None:
            return []
        return [d for d in self.items if d.n is not None and d.at <= self.now]

    @property
    def warning(self) -> bool:
        """An effect lapses before the approval expires, or within ``SOON`` (or has)."""
        first = self.first
        if first is None or first.n is None or self.now is None:
            return False
        return self.approval is not None or first.at - self.now <= SOON


def effect_deadlines(steps: Iterable[Step]) -> list[Deadline]:
    """When the task's standing effects lapse at their provider: done calls, not undone, whose
    evidence names an instant in a deadline's field."""
    found = []
    for s in steps:
        if s.kind != StepKind.CALL or s.state != StepState.DONE or s.offset_by_id is not None:
            continue
        if s.offsets_id is not None:  # an undo's own evidence is not a standing effect
            continue
        for name, value in sorted(s.evidence.items()):
            if str(name).lower() not in DEADLINE_FIELDS:
                continue
            at = as_instant(value)
            if at is not None:
                what = f"step {s.n} ({s.tool}) lapses at the provider"
                found.append(Deadline(at, what, s.n, str(name), f"step {s.n} ({s.tool})"))
    return found


def deadlines_of(held: Approval | None, steps: Iterable[Step], now: datetime) -> Deadlines:
    """A held step's deadlines: its approval's expiry and its effects' lapses, earliest first
    (nothing when no step is held)."""
    if held is None:
        return Deadlines(now=now)
    items = [Deadline(held.expires_at, "this approval expires"), *effect_deadlines(steps)]
    return Deadlines(tuple(sorted(items, key=lambda d: d.at)), now)
