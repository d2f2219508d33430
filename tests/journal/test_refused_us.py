"""A refusal of *us* (docs/design.md §2, §7), in the core: what it proves, and what a person's
fix then does — with the in-process provider and the database."""

from __future__ import annotations

from typing import Any

import pytest

from journal.models import Step, Task
from journal.operator import task_resume
from journal.policy import Policy
from journal.record import task_create
from journal.run import task_advance
from tests.journal.support import ChargeTool, Provider, ScriptedPlanner, charge, invoice
from tests.journal.test_sagas import SagaRules, saga_task, world

pytestmark = pytest.mark.usefixtures("committed")

AT_ONCE = Policy(lookup_schedule=(0.0, 0.0), transient_retry_delays=(0.0,))


def test_a_refusal_of_our_retry_proves_nothing_about_the_first_attempt() -> None:
    """The first attempt landed and its reply was lost; the key is then revoked, the lookup
    cannot tell, and the retry (same key) is refused with 401 — before the provider looked.
    That is no proof of "not done": the step stays unknown, a person fixes the key, and the
    lookup after they resume finds the charge. One charge, never a second key."""
    provider = Provider()
    tool = ChargeTool(provider, script=["timeout_after", "unauthorized"], lookup_script=["lagging"])
    task = task_create(kind="renewal", goal="charge")
    planner = ScriptedPlanner([charge(invoice())])
    result = task_advance(task_id=task.pk, planner=planner, tools={"charge": tool}, policy=AT_ONCE)

    assert result.stopped == "needs_human"
    flagged = Task.objects.get(pk=task.pk)
    assert flagged.attention_code == "misconfigured"
    [step] = Step.objects.filter(task=task, kind="call")
    assert (step.state, step.attempts) == ("unknown", 2)
    assert step.outcome["misconfigured"] is True
    assert len(provider.ledger) == 1

    task_resume(task_id=task.pk, actor="ops", reason="key fixed")
    again = task_advance(task_id=task.pk, planner=planner, tools={"charge": tool}, policy=AT_ONCE)
    assert again.stopped == "finished"
    assert Step.objects.get(pk=step.pk).state == "done"
    assert Step.objects.filter(task=task, kind="call").count() == 1
    assert len(provider.ledger) == 1


def test_a_saga_undo_refused_as_ours_is_made_again_after_the_fix() -> None:
    provider, tools = world()
    tools["charge"].script = ["ok", "refuse"]
    tools["refund"].script = ["unauthorized"]
    task = saga_task()
    planner = ScriptedPlanner([charge(invoice()), charge(invoice())])
    run: dict[str, Any] = {"planner": planner, "tools": tools, "rules": SagaRules()}

    assert task_advance(task_id=task.pk, policy=AT_ONCE, **run).stopped == "needs_human"
    flagged = Task.objects.get(pk=task.pk)
    assert flagged.attention_code == "misconfigured"  # not compensation_failed: nothing happened
    undo = Step.objects.get(task=task, tool="refund")
    assert undo.state == "not_done" and undo.outcome["misconfigured"] is True

    task_resume(task_id=task.pk, actor="ops", reason="refund key fixed")
    assert task_advance(task_id=task.pk, policy=AT_ONCE, **run).stopped == "compensated"
    undos = list(Step.objects.filter(task=task, tool="refund").order_by("n"))
    assert [u.state for u in undos] == ["not_done", "done"]
    assert undos[1].key.endswith(":undo2")  # a new key: the first provably did nothing
    refunds = [e for e in provider.ledger if e.args.get("undoes")]
    assert len(refunds) == 1
