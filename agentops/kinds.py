"""A task's kind as the harness uses it: the kinds the installed apps declare
(``agentops.effects``), the door a task comes in by, and the tools and rules of its runs."""

from __future__ import annotations

from collections.abc import Mapping
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


def references_of(kind: str, refs: Mapping[str, Any]) -> list[str]:
    """The business references a task names (``INV-2291``), as its kind declares them."""
    try:
        return kind_get(kind).references_of(refs)
    except UnknownKind:
        return []
