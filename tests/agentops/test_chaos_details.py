"""What a chaos run keeps for a person looking into a slow task (devtools/chaos/run/details.py):
each entry of its journal, a recorded step's with the call its row holds."""

from __future__ import annotations

import pytest

from devtools.chaos.run.details import journals
from journal.record import task_create
from journal.run import task_advance
from tests.journal.support import ChargeTool, Provider, ScriptedPlanner, charge, invoice

pytestmark = pytest.mark.usefixtures("committed")


def test_a_recorded_step_says_its_call_though_its_entry_does_not() -> None:
    task = task_create(kind="charge", goal="g")
    inv = invoice()
    task_advance(
        task_id=task.pk,
        planner=ScriptedPlanner([charge(inv)]),
        tools={"charge": ChargeTool(Provider())},
    )
    entries = journals([str(task.pk), "not-a-task"])[str(task.pk)]
    recorded = [data for _, kind, _, data in entries if kind == "step_recorded"]
    assert recorded[0]["by"].startswith("runner-")  # which runner recorded it (its version)
    assert recorded == [
        {
            "by": recorded[0]["by"],
            "attempt": 1,
            "key": recorded[0]["key"],
            "tool": "charge",
            "args": {"invoice": inv, "amount": 4900},
            "guard": f"charge:{inv}",
        }
    ]
    assert recorded[0]["key"].endswith(":1")
    assert [kind for _, kind, _, _ in entries][-1] == "task_finished"
