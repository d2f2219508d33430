"""A task's kind as the harness uses it: the kinds and tools the installed apps declare
(``agentops.effects``), and the tools, rules and planner of a task's runs (in the chaos run
only, its tools wrapped)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils.module_loading import import_string

from agentops.effects import (
    Followup,
    Kind,
    KindRules,
    Ref,
    TaskRefused,
    Tool,
    UnknownKind,
    kind_get,
    kinds,
    task_problems,
    task_start,
    tools,
)
from agentops.effects._kind import REQUIRED
from journal.models import Task
from journal.protocols import Call, Decision, Planner, TaskFacts

__all__ = [
    "REQUIRED",
    "Kind",
    "KindRules",
    "Ref",
    "TaskRefused",
    "UnknownKind",
    "followup_start",
    "kind_get",
    "kinds",
    "planner_bound",
    "rules_for",
    "task_problems",
    "tool_registry",
    "tools_for",
    "tools_wrapped",
]


def tool_registry() -> dict[str, Tool]:
    """Every declared tool, made fresh, so settings changed since (e.g. in tests) count."""
    return tools()


def tools_wrapped(chosen: dict[str, Tool]) -> dict[str, Tool]:
    """``chosen`` tools through each wrapper ``TOOL_WRAPPERS`` names, in order: a dotted path to a
    callable that takes the tools by name and returns them, some wrapped. None in
    production; the chaos run arms a worker with one that kills it at a call."""
    for path in settings.TOOL_WRAPPERS:
        chosen = import_string(path)(chosen)
    return chosen


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


def followup_start(follow: Followup, *, actor: str) -> Task | None:
    """Start the task a kind's hook named (``Kind.on_cancel``, ``Kind.on_undone_elsewhere``)
    unless one of its kind with these very references was started already: under a lock on
    them, so two callers at once start one. A hook keys its followup by what it is about
    (the refund's id, the invoice), and it is started once however often it is named. Call
    it inside the transaction that makes the fact it follows (the cancel, the finding)."""
    refs = dict(follow.refs)
    with transaction.atomic():
        with connection.cursor() as cursor:
            named = json.dumps([follow.kind, refs], sort_keys=True)
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"followup:{named}"])
        if Task.objects.filter(kind=follow.kind, refs=refs).exists():
            return None
        return task_start(kind=follow.kind, goal=follow.goal, refs=refs, actor=actor)
