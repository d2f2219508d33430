"""The scripted planner: each kind's deterministic playbook (its app registers it with
``agentops.effects.register_playbook``), for the demo and the tests.

Like a real model, when it is asked again about a situation it has already decided, it
rephrases: an amount of 4900 becomes "49.00". The harness never asks twice (the decision is
the record), so in a correct run this never shows; if it did, the journal would record the
rephrased decision as invalid arguments for everyone to see.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from agentops.effects import registry
from journal.protocols import Call, Decision, TaskFacts


class NoPlaybook(LookupError):
    """The scripted planner has no playbook for this kind (its app registers none)."""


class ScriptedPlanner:
    max_duration = timedelta(0)  # it answers at once

    def __init__(self) -> None:
        self.asked: Counter[tuple[str, int]] = Counter()

    def decide(self, facts: TaskFacts) -> Decision:
        situation = (facts.task_id, len(facts.steps))
        self.asked[situation] += 1
        playbook = registry.playbooks.get(facts.kind)
        if playbook is None:
            raise NoPlaybook(
                f"the scripted planner has no playbook for kind {facts.kind!r}: its app "
                "registers none (agentops.effects.register_playbook)"
            )
        decision = playbook(facts)
        if isinstance(decision, Call) and self.asked[situation] > 1:
            return Call(decision.tool, _rephrase(decision.args), raw={"rephrased": True})
        return (
            Call(decision.tool, decision.args, raw={"playbook": facts.kind})
            if isinstance(decision, Call)
            else decision
        )


def _rephrase(args: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: f"{v / 100:.2f}" if k == "amount" and isinstance(v, int) else v for k, v in args.items()
    }
