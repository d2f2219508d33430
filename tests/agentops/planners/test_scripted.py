"""The scripted planner: it rephrases when asked again about a situation, as a model would, and
its memory of what it was asked stays bounded however many tasks a worker runs."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agentops.effects import registry
from agentops.planners.scripted import REMEMBERED_TASKS, ScriptedPlanner
from journal.protocols import Call, Decision, Finish, TaskFacts

KIND = "scripted_test"


def _playbook(facts: TaskFacts) -> Decision:
    if facts.refs.get("done"):
        return Finish("over")
    return Call("charge", {"amount": 4900, "invoice": "INV-1"})


@pytest.fixture(autouse=True)
def playbook(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.playbooks, KIND, _playbook)


def _facts(task_id: str, **refs: Any) -> TaskFacts:
    return TaskFacts(task_id=task_id, kind=KIND, goal="g", refs=refs, steps=())


def test_asked_again_about_the_same_situation_it_rephrases() -> None:
    planner = ScriptedPlanner()
    task = str(uuid.uuid4())
    first = planner.decide(_facts(task))
    again = planner.decide(_facts(task))
    assert isinstance(first, Call) and first.args["amount"] == 4900
    assert isinstance(again, Call) and again.args["amount"] == "49.00"
    other = planner.decide(_facts(str(uuid.uuid4())))
    assert isinstance(other, Call) and other.args["amount"] == 4900


def test_its_memory_is_bounded_however_many_tasks_go_by() -> None:
    planner = ScriptedPlanner()
    for _ in range(3 * REMEMBERED_TASKS):
        planner.decide(_facts(str(uuid.uuid4())))
    assert len(planner.asked) == REMEMBERED_TASKS
    # A finished task is forgotten at once.
    task = str(uuid.uuid4())
    planner.decide(_facts(task))
    assert task in planner.asked
    assert isinstance(planner.decide(_facts(task, done=True)), Finish)
    assert task not in planner.asked
