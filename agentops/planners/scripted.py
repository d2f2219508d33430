"""The scripted planner: each kind's deterministic playbook (its app registers it with
``agentops.effects.register_playbook``), for the demo and the tests.

Like a real model, when it is asked again about a situation it has already decided, it
rephrases: an amount of 4900 becomes "49.00". The harness never asks twice (the decision is
the record), so in a correct run this never shows; if it did, the journal would record the
rephrased decision as invalid arguments for everyone to see.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from agentops.effects import registry
from journal.protocols import Call, Decision, TaskFacts


class NoPlaybook(LookupError):
    """The scripted planner has no playbook for this kind (its app registers none)."""


# How many tasks' last situations the planner remembers (a worker's planner lives as long as
# the worker): enough to notice being asked again, never more memory as tasks go by.
REMEMBERED_TASKS = 4096


class ScriptedPlanner:
    max_duration = timedelta(0)  # it answers at once

    def __init__(self) -> None:
        # Per task, the situation it was last asked about (its number of steps) and how often:
        # the newest REMEMBERED_TASKS tasks, a task forgotten once it is finished.
        self.asked: OrderedDict[str, tuple[int, int]] = OrderedDict()

    def _times_asked(self, task_id: str, n: int) -> int:
        last, times = self.asked.pop(task_id, (n, 0))
        times = times + 1 if last == n else 1
        self.asked[task_id] = (n, times)
        while len(self.asked) > REMEMBERED_TASKS:
            self.asked.popitem(last=False)
        return times

    def decide(self, facts: TaskFacts) -> Decision:
        task_id = str(facts.task_id)
        times = self._times_asked(task_id, len(facts.steps))
        playbook = registry.playbooks.get(facts.kind)
        if playbook is None:
            raise NoPlaybook(
                f"the scripted planner has no playbook for kind {facts.kind!r}: its app "
                "registers none (agentops.effects.register_playbook)"
            )
        decision = playbook(facts)
        if not isinstance(decision, Call):
            self.asked.pop(task_id, None)  # finished: never asked about again
            return decision
        if times > 1:
            return Call(decision.tool, _rephrase(decision.args), raw={"rephrased": True})
        return Call(decision.tool, decision.args, raw={"playbook": facts.kind})


def _rephrase(args: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: f"{v / 100:.2f}" if k == "amount" and isinstance(v, int) else v for k, v in args.items()
    }
