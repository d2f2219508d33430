"""A task's kind as the harness uses it: the kinds the installed apps declare
(``agentops.effects``), the door a task comes in by, and the tools and rules of its runs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any

from agentops.effects import (
    Kind,
    KindRules,
    Ref,
    TaskRefused,
    Tool,
    UnknownKind,
    kind_get,
    kinds,
    plan_problems,
    task_problems,
)
from agentops.effects._kind import REQUIRED
from agentops.tools import tool_registry, tools_wrapped
from journal.models import Task
from journal.protocols import Call, Decision, Planner, TaskFacts

__all__ = [
    "REQUIRED",
    "Kind",
    "KindRules",
    "Ref",
    "TaskRefused",
    "UnknownKind",
    "kind_get",
    "kinds",
    "plan_problems_of",
    "planner_bound",
    "rules_for",
    "task_problems",
    "tools_for",
]


def plan_problems_of(*, kind: Kind, plan: Any) -> list[str]:
    """What is wrong with a saga's plan, judged with the declared tools."""
    return plan_problems(kind=kind, plan=plan, tools=tool_registry())


def tools_for(task: Task) -> dict[str, Tool]:
    """The tools this task's kind may use (through the chaos run's wrappers, if any)."""
    kind = kind_get(task.kind)
    allowed = {name: tool for name, tool in tool_registry().items() if name in kind.tools}
    return tools_wrapped(allowed)


def rules_for(task: Task) -> KindRules:
    return KindRules(kind_get(task.kind), task.refs, tool_registry(), task.plan)


class BoundPlanner:
    """A task's planner whose calls carry what the task's kind binds into them
    (``KindRules.filled``: the customer's link at the end of an email), whichever planner
    (scripted, a model, a chaos run's misbehaving one) decided them."""

    def __init__(self, planner: Planner, rules: KindRules) -> None:
        self.planner, self.rules = planner, rules

    @property
    def max_duration(self) -> timedelta:
        return self.planner.max_duration

    def decide(self, facts: TaskFacts) -> Decision:
        decision = self.planner.decide(facts)
        if not isinstance(decision, Call):
            return decision
        args = self.rules.filled(tool=decision.tool, args=decision.args, facts=facts)
        # The planner's own answer stays in ``raw``, for audit.
        return decision if args == dict(decision.args) else replace(decision, args=args)


def planner_bound(planner: Planner, rules: KindRules) -> Planner:
    """``planner``, deciding for a task judged by ``rules``: see :class:`BoundPlanner`."""
    return BoundPlanner(planner, rules)


def references_of(kind: str, refs: Mapping[str, Any]) -> list[str]:
    """The business references a task names (``INV-2291``), as its kind declares them."""
    try:
        return kind_get(kind).references_of(refs)
    except UnknownKind:
        return []
