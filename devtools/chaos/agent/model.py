"""The mcp harness's agent's model: what it does next after each answer, and how it slips
(:class:`AgentModel`, its dice seeded by the run's seed and the situation).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from devtools.chaos.agent.calls import DONE, NOT_DONE, REFUSED, UNKNOWN
from devtools.chaos.agent.intents import SPELLINGS

# What it does next.
AGAIN, CHECK, NEXT, CORRECT = "again", "check", "next", "correct"
REPHRASE, FORGET, TWICE, KEY_REUSE, CONFIRM = "rephrase", "forget", "twice", "key_reuse", "confirm"
SLIPS = (REPHRASE, FORGET, TWICE, KEY_REUSE, CONFIRM)
TROUBLE_SLIPS = (REPHRASE, FORGET, TWICE, KEY_REUSE)


@dataclass(frozen=True)
class AgentModel:
    """How the agent misbehaves: after trouble it slips with probability ``rate`` (how, by
    ``weights`` in the order of :data:`TROUBLE_SLIPS`), ``most`` times per conversation at
    most; told done, it asks again (``confirm``) with probability ``confirm``; it opens an
    intent with a key of its own with probability ``own_key``, and with two clients at once
    with probability ``twice``."""

    seed: int
    rate: float = 0.35
    weights: tuple[float, float, float, float] = (0.35, 0.25, 0.25, 0.15)
    most: int = 3
    confirm: float = 0.1
    own_key: float = 0.3
    twice: float = 0.05

    def _dice(self, situation: str) -> random.Random:
        return random.Random(f"{self.seed}:mcp:{situation}")  # noqa: S311 - replayable

    def opening(self, situation: str) -> tuple[bool, str]:
        """How the agent first asks for an intent: whether another client asks at the same
        moment, and where it puts a key of its own (``args``, ``meta``, or ``""``: none)."""
        dice = self._dice(f"{situation}:open")
        twice = dice.random() < self.twice
        key = ""
        if dice.random() < self.own_key:
            key = dice.choice(("args", "meta"))
        return twice, key

    def next(
        self, situation: str, seen: str, slipped: int, *, reference: bool, earlier_key: bool
    ) -> str:
        """What the agent does after being told ``seen`` (or not told: dropped, error), having
        slipped ``slipped`` times in this conversation: :data:`NEXT` (settled: the next
        intent), :data:`AGAIN`, :data:`CHECK` (``check_effect`` on the reference it holds),
        :data:`CORRECT` (asks again as it should have, after a refusal of its own slip), or a
        slip."""
        dice = self._dice(f"{situation}:{seen}")
        can_slip = slipped < self.most
        if seen in (DONE, NOT_DONE):
            if seen == DONE and can_slip and dice.random() < self.confirm:
                return CONFIRM
            return NEXT
        if seen == REFUSED:
            return CORRECT
        if can_slip and dice.random() < self.rate:
            how = dice.choices(TROUBLE_SLIPS, self.weights)[0]
            if how == KEY_REUSE and not earlier_key:
                how = REPHRASE
            return how
        return CHECK if seen == UNKNOWN and reference else AGAIN

    def spelling(self, situation: str, *, reminder: bool) -> str:
        choices = SPELLINGS if reminder else SPELLINGS[:-1]
        return self._dice(f"{situation}:spelling").choice(choices)

    def asks_first(self, situation: str) -> bool:
        """After losing its context, whether it asks ``effects_for`` before acting (as the
        server's instructions say), or just asks for the intent again."""
        return self._dice(f"{situation}:recall").random() < 0.5
