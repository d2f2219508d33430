"""Task kinds and the limits the harness enforces on them (not the prompt).

Each kind names the tools its tasks may use (an allowlist: any other tool is, for that
task, an unknown tool and its decision is recorded ``not_done``), a cap on the money a
task may move, and a step limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Q

from agentops.tools import tool_registry
from agentops.tools.base import SchemaTool
from journal.models import Step, Task
from journal.outcomes import Observation, Outcome, StepState


@dataclass(frozen=True)
class TaskKind:
    name: str
    tools: frozenset[str]
    money_cap: int  # minor units a task may charge in all, done or possibly done
    max_steps: int


KINDS = {
    k.name: k
    for k in (
        TaskKind("renewal", frozenset({"charge_customer", "send_email"}), 100_000, 10),
        TaskKind(
            "trip",
            frozenset(
                {
                    "hold_flight",
                    "release_flight",
                    "book_hotel",
                    "cancel_hotel",
                    "charge_customer",
                    "refund_charge",
                    "send_email",
                }
            ),
            500_000,
            20,
        ),
        TaskKind("reminders", frozenset({"send_email"}), 0, 100),
    )
}


class UnknownKind(ValueError):
    pass


def kind_get(name: str) -> TaskKind:
    try:
        return KINDS[name]
    except KeyError:
        raise UnknownKind(
            f"unknown task kind {name!r} (known: {', '.join(sorted(KINDS))})"
        ) from None


def money_committed(*, task_id: Any) -> int:
    """Minor units the task has charged or may have charged (done, in flight, unknown)."""
    amounts = Step.objects.filter(
        Q(state=StepState.DONE) | Q(state=StepState.PENDING) | Q(state=StepState.UNKNOWN),
        task_id=task_id,
        tool="charge_customer",
    ).values_list("args__amount", flat=True)
    return sum(a for a in amounts if isinstance(a, int))


class MoneyCapped:
    """A charging tool whose arguments are also checked against the task's money cap."""

    def __init__(self, tool: SchemaTool, *, task_id: Any, cap: int) -> None:
        self.tool, self.task_id, self.cap = tool, task_id, cap

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tool, name)

    def validate(self, args: Mapping[str, Any]) -> list[str]:
        problems = self.tool.validate(args)
        amount = args.get("amount")
        if not problems and isinstance(amount, int):
            remaining = self.cap - money_committed(task_id=self.task_id)
            if amount > remaining:
                problems.append(
                    f"amount: {amount} exceeds what this task may still charge ({remaining} of "
                    f"its limit of {self.cap})"
                )
        return problems

    def call(self, args: Mapping[str, Any], *, key: str) -> Observation:
        return self.tool.call(args, key=key)

    def lookup(self, args: Mapping[str, Any], *, key: str) -> Outcome | None:
        return self.tool.lookup(args, key=key)


def tools_for(task: Task) -> dict[str, Any]:
    """The tools this task may use, with its limits applied."""
    kind = kind_get(task.kind)
    tools: dict[str, Any] = {
        name: tool for name, tool in tool_registry().items() if name in kind.tools
    }
    if "charge_customer" in tools:
        tools["charge_customer"] = MoneyCapped(
            tools["charge_customer"], task_id=task.pk, cap=kind.money_cap
        )
    return tools
