"""Keys from the harness, write before acting, and the decision as the record (§3, §4)."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from django.db import connection

from journal.leases import lease_acquire
from journal.models import Entry, EntryKind, Step, Task
from journal.perform import step_perform
from journal.policy import Policy
from journal.protocols import Call, CostClass
from journal.record import step_record, task_create
from journal.run import task_advance
from journal.selectors import task_facts, task_open_step
from tests.databases import lease_expire
from tests.journal.support import (
    ChargeTool,
    Provider,
    ScriptedPlanner,
    SimulatedCrash,
    charge,
    invoice,
    step_key,
)

pytestmark = pytest.mark.usefixtures("committed")


def _new_task() -> Task:
    return task_create(kind="renewal", goal="charge the invoice, email the receipt")


def _expire_lease(task: Task) -> None:
    # A dead runner's lease runs out; the tests do not wait for the clock to say so.
    lease_expire(task.pk)


def test_key_is_derived_from_the_step_id_and_nothing_the_planner_says() -> None:
    task = _new_task()
    tool = ChargeTool(Provider())
    decision = Call(
        "charge",
        {"invoice": invoice(), "amount": 4900, "idempotency_key": "model-chosen", "key": "x"},
        raw={"idempotency_key": "model-chosen"},
    )
    planner = ScriptedPlanner([decision])
    task_advance(task_id=task.pk, planner=planner, tools={"charge": tool})
    step = Step.objects.get(task=task, n=1)
    assert step.key == step_key(task.pk, 1) == f"ao:{task.pk}:1"
    assert [key for key, _ in tool.calls] == [step.key]


def test_every_attempt_sends_the_recorded_key_and_arguments() -> None:
    task = _new_task()
    inv = invoice()
    tool = ChargeTool(Provider(), script=["timeout_before", "rate_limited", "ok"])
    policy_zero = Policy(lookup_schedule=(0.0, 0.0, 0.0))
    result = task_advance(
        task_id=task.pk,
        planner=ScriptedPlanner([charge(inv)]),
        tools={"charge": tool},
        policy=policy_zero,
    )
    assert result.stopped == "finished"
    step = Step.objects.get(task=task, n=1)
    assert step.state == "done"
    assert tool.calls == [(step.key, {"invoice": inv, "amount": 4900})] * 3
    assert step.attempts == 3
    assert len(tool.provider.effects_for(step.key)) == 1


def test_the_step_is_committed_before_the_tool_is_called() -> None:
    task = _new_task()
    seen: list[Any] = []

    def look_from_another_connection(key: str, args: Any) -> None:
        # A separate connection sees only what is committed.
        params = connection.get_connection_params()
        with psycopg.connect(**params, autocommit=True) as conn:
            seen.append(
                conn.execute(
                    "SELECT state, args, attempts, first_started_at IS NOT NULL "
                    "FROM journal_step WHERE key = %s",
                    [key],
                ).fetchone()
            )
            seen.append(
                conn.execute(
                    "SELECT e.kind FROM journal_entry e JOIN journal_step s ON s.id = e.step_id "
                    "WHERE s.key = %s ORDER BY e.id",
                    [key],
                ).fetchall()
            )

    inv = invoice()
    tool = ChargeTool(Provider(), on_call=look_from_another_connection)
    task_advance(task_id=task.pk, planner=ScriptedPlanner([charge(inv)]), tools={"charge": tool})
    state, args, attempts, started = seen[0]
    assert (state, json.loads(args), attempts, started) == (
        "pending",
        {"invoice": inv, "amount": 4900},
        1,
        True,
    )
    assert seen[1] == [("step_recorded",)]  # with its key and its first attempt's start
    # ... and the outcome is committed after it: one entry for how the attempt ended and
    # how the step settled.
    entries = list(Entry.objects.filter(step__task=task, step__n=1).order_by("id"))
    assert [e.kind for e in entries] == ["step_recorded", "step_settled"]
    # The call itself is the step's row, frozen: its entry does not say it a second time,
    # only which runner recorded it (its lease's owner).
    assert set(entries[0].data) == {"attempt", "by", "key"} and entries[0].data["attempt"] == 1
    assert entries[0].data["by"].startswith("runner-")  # task_advance's name, given none
    assert entries[0].data["key"] == Step.objects.get(task=task, n=1).key
    assert entries[1].data["state"] == "done" and entries[1].data["classified"] == "done"


def test_a_crash_between_record_and_settle_leaves_a_step_with_no_outcome() -> None:
    task = _new_task()
    tool = ChargeTool(Provider(), script=["crash_after"])
    with pytest.raises(SimulatedCrash):
        task_advance(
            task_id=task.pk, planner=ScriptedPlanner([charge(invoice())]), tools={"charge": tool}
        )
    step = task_open_step(task_id=task.pk)
    assert step is not None and step.state == "pending" and step.settled_at is None
    # The effect happened at the provider; the journal must not call it "not done".
    assert len(tool.provider.effects_for(step.key)) == 1
    # The dead runner's lease still stands: nobody else runs the task meanwhile.
    assert task_advance(task_id=task.pk, planner=ScriptedPlanner([]), tools={}).stopped == "busy"


def test_resume_rereads_the_decision_instead_of_asking_the_planner_again() -> None:
    """docs/design.md §4: a planner that rephrases (4900 → "49.00") is never asked twice."""
    task = _new_task()
    inv = invoice()
    planner = ScriptedPlanner([charge(inv, 4900)], rephrase=True)
    tool = ChargeTool(Provider(), script=["crash_before"])
    with pytest.raises(SimulatedCrash):
        task_advance(task_id=task.pk, planner=planner, tools={"charge": tool})
    assert len(planner.asked) == 1
    _expire_lease(task)

    result = task_advance(task_id=task.pk, planner=planner, tools={"charge": tool})

    assert result.stopped == "finished"
    step = Step.objects.get(task=task, n=1)
    assert step.state == "done"
    # One effect, with the original arguments and key; the crashed call never left.
    effects = tool.provider.effects_for(step.key)
    assert [e.args for e in effects] == [{"invoice": inv, "amount": 4900}]
    # The planner was asked about step 1 once, then only about what came after it.
    assert [len(f.steps) for f in planner.asked] == [0, 1]
    assert tool.lookups == [step.key]


def test_a_settled_step_is_not_called_again_on_resume() -> None:
    task = _new_task()
    planner = ScriptedPlanner([charge(invoice()), charge(invoice())])
    tool = ChargeTool(Provider(), script=["ok", "crash_before"])
    with pytest.raises(SimulatedCrash):
        task_advance(task_id=task.pk, planner=planner, tools={"charge": tool})
    _expire_lease(task)
    task_advance(task_id=task.pk, planner=planner, tools={"charge": tool})
    first, second = Step.objects.filter(task=task, kind="call").order_by("n")
    assert [k for k, _ in tool.calls].count(first.key) == 1
    assert first.state == second.state == "done"


def test_finishing_is_recorded_as_a_decision() -> None:
    task = _new_task()
    task_advance(task_id=task.pk, planner=ScriptedPlanner([]), tools={})
    task.refresh_from_db()
    assert task.status == "finished"
    finish = Step.objects.get(task=task)
    # What the task says it did is the journal's account; the planner's words are kept apart.
    assert finish.kind == "finish" and finish.detail == "Nothing was done: no step was decided."
    assert finish.outcome["planner_summary"] == "all done"
    assert Entry.objects.filter(task=task, kind=EntryKind.TASK_FINISHED).exists()
    # Finished is final: a later runner records nothing more.
    assert task_advance(task_id=task.pk, planner=ScriptedPlanner([]), tools={}).stopped == (
        "finished"
    )
    assert Step.objects.filter(task=task).count() == 1


@pytest.mark.parametrize(
    ("decision", "expected"),
    [
        (Call("teleport", {"to": "Mars"}), "unknown tool 'teleport'"),
        (Call("charge", {"invoice": "INV-1", "amount": "49.00"}), "amount must be a positive"),
        (Call("charge", {"amount": 4900}), "invoice must be a string"),
        (Call("charge", {"invoice": "INV-1", "amount": object()}), "not JSON serializable"),
    ],
)
def test_unknown_tools_and_invalid_arguments_are_recorded_not_done_and_never_run(
    decision: Call, expected: str
) -> None:
    task = _new_task()
    tool = ChargeTool(Provider())
    task_advance(task_id=task.pk, planner=ScriptedPlanner([decision]), tools={"charge": tool})
    step = Step.objects.get(task=task, n=1)
    assert step.state == "not_done"
    assert expected in step.detail
    assert step.attempts == 0 and tool.calls == []
    assert Entry.objects.filter(step=step, kind=EntryKind.DECISION_REJECTED).count() == 1
    # The planner is told, then decides again (here: finish).
    assert Task.objects.get(pk=task.pk).status == "finished"


def test_the_planner_sees_facts_from_the_journal() -> None:
    task = _new_task()
    inv = invoice()
    tool = ChargeTool(Provider(), script=["refuse"])
    lease = lease_acquire(task_id=task.pk, owner="x")
    assert lease is not None
    step = step_record(lease=lease, decision=charge(inv), tools={"charge": tool})
    step_perform(lease=lease, step=step, tool=tool)
    facts = task_facts(task=Task.objects.get(pk=task.pk))
    assert facts.steps[0].state == "not_done"
    assert facts.steps[0].result_text().startswith("status: not_done — charge for " + inv)
    assert "safe to decide again" in facts.steps[0].result_text()


@pytest.mark.parametrize(
    ("script", "state", "calls"),
    [
        (["timeout_before", "error_500_after", "ok"], "done", 3),
        (["timeout_before"] * 4, "not_done", 3),
    ],
)
def test_a_read_that_did_not_complete_is_tried_again_within_its_attempts_then_not_done(
    script: list[str], state: str, calls: int
) -> None:
    """A read has no effect to be unsure about (§9): a timeout or a 500 is simply tried again,
    up to ``read_attempts`` in all; then it is not done — never unknown, never a person."""
    task = _new_task()
    read = ChargeTool(Provider(), name="read", cost=CostClass.READ, script=script)
    task_advance(
        task_id=task.pk,
        planner=ScriptedPlanner([Call("read", {"invoice": invoice(), "amount": 1})]),
        tools={"read": read},
        policy=Policy(lookup_schedule=(0.0, 0.0, 0.0), read_attempts=3),
    )
    step = Step.objects.get(task=task, n=1)
    assert (step.state, step.attempts, len(read.calls)) == (state, calls, calls)
    assert read.lookups == []  # a read is never looked up
    if state == "not_done":
        assert step.detail.startswith("the read did not complete")
    assert Task.objects.get(pk=task.pk).status == "finished"
