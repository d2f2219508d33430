"""The journal's runner path alone: record → a tool that does nothing → settle, under a lease.

A planner decides ``steps`` calls of a tool whose call does nothing, then finishes: what
``tests/journal/test_cost.py`` counts a step's statements, commits and HOT updates with,
below the harness (no kind, no rules, no HTTP). The benchmark measures the path users get
instead (devtools.bench.production).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from journal.outcomes import Observation, Outcome, Reply
from journal.policy import Policy
from journal.protocols import Call, CostClass, Decision, Finish, TaskFacts

GOAL = "bench: no-op steps"


class NoopTool:
    """A full-effect tool whose call does nothing and always succeeds."""

    name = "noop"
    cost = CostClass.FULL
    key_lifetime = timedelta(hours=24)
    lookup_lag = timedelta(0)
    compensation: str | None = None
    irreversible = False
    evidence = ("id",)

    def validate(self, args: Mapping[str, Any]) -> list[str]:
        return []

    def guard(self, args: Mapping[str, Any]) -> str | None:
        return None

    def once(self, args: Mapping[str, Any]) -> bool:
        return False

    def call(self, args: Mapping[str, Any], *, key: str) -> Observation:
        return Reply(200, evidence={"id": key})

    def lookup(self, args: Mapping[str, Any], *, key: str) -> Outcome | None:
        return None

    def undo_args(self, args: Mapping[str, Any], evidence: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def standing(self, args: Mapping[str, Any], evidence: Mapping[str, Any]) -> bool | None:
        return None


@dataclass
class Countdown:
    """Decides ``steps`` no-op calls, then finishes."""

    steps: int
    max_duration: timedelta = timedelta(0)

    def decide(self, facts: TaskFacts) -> Decision:
        n = len(facts.steps)
        return Call("noop", {"i": n}) if n < self.steps else Finish("done")


TOOLS = {"noop": NoopTool()}
POLICY = Policy(max_steps=100_000)
