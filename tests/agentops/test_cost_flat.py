"""A step's Python calls do not grow with its task (docs/design.md §14: what every step asks
of its whole task is carried, not asked again). Counted, not timed: the function calls the
runner makes between two decisions (``sys.setprofile``: Python functions, generators each
time they resume, and builtins), near the start of a long task and at its end, with a kind
whose money cap is checked before every call. A proxy: a loop that makes no call per step it
reads (a comprehension's body, work in C or in SQL) is not seen here; the benchmark's CPU a
step, at the start and the end of a task, is the measure."""

from __future__ import annotations

import statistics
import sys
from typing import Any

import pytest

from agentops.effects import Kind, KindRules, Money
from devtools.bench.core_path import POLICY, Countdown, NoopTool
from journal.protocols import Call, Decision, Finish, TaskFacts
from journal.record import task_create
from journal.run import task_advance

pytestmark = pytest.mark.usefixtures("committed")

STEPS = 240


class PaidNoop(NoopTool):
    """The no-op tool, declaring the money each call moves: the kind's cap reads it."""

    money = Money(amount="amount", currency="currency")


KIND = Kind(
    name="cost_flat",
    description="Pay one euro at a time, many times.",
    refs_schema={"type": "object"},
    binds={"noop": ()},
    money_caps={"eur": 10 * STEPS},
    max_steps=STEPS + 1,
)


class Paying(Countdown):
    """Countdown's calls, each moving one euro; notes the calls made so far as it decides."""

    def __init__(self, steps: int, calls: list[int]) -> None:
        super().__init__(steps)
        self.calls, self.at = calls, [0]

    def decide(self, facts: TaskFacts) -> Decision:
        self.calls.append(self.at[0])
        n = len(facts.steps)
        if n < self.steps:
            return Call("noop", {"i": n, "amount": 1, "currency": "eur"})
        return Finish("done")


def test_a_steps_python_work_is_the_same_at_the_end_of_a_long_task_as_at_its_start() -> None:
    tool = PaidNoop()
    calls: list[int] = []
    planner = Paying(STEPS, calls)

    def count(frame: Any, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            planner.at[0] += 1

    task = task_create(kind="cost_flat", goal="many small payments")
    # A journal tool declaring its money, not an agentops Tool: all the cap reads of one.
    rules = KindRules(KIND, {}, {"noop": tool})  # type: ignore[dict-item]
    before = sys.getprofile()
    sys.setprofile(count)
    try:
        result = task_advance(
            task_id=task.pk, planner=planner, tools={"noop": tool}, policy=POLICY, rules=rules
        )
    finally:
        sys.setprofile(before)
    assert result.stopped == "finished"
    per_step = [b - a for a, b in zip(calls, calls[1:], strict=False)]
    assert len(per_step) == STEPS
    # Means, not medians: work done every few steps shows too.
    early, late = statistics.fmean(per_step[5:45]), statistics.fmean(per_step[-40:])
    # Before what a task had committed, and whether a step of it was open, were carried from
    # step to step, each step read every step before it: its last steps here made three times
    # the calls of its first (the open-step check alone, over one and a half times).
    assert late <= early * 1.01, (early, late)
