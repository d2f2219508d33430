"""One commit per step (docs/design.md §4): a step's settlement goes with the next record.

The runner holds an attempt's settlement back while its planner decides, then writes it
and the next step's record in one statement (journal_record's p_settles). These tests break
that commit at every point — the runner dying while the planner decides, a webhook that
settles the step first (the same way, or the other way), a guard that refuses the next
record, a lease taken over, a slow planner — and check, against the provider's ledger, that
nothing is lost and nothing happens twice.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from journal.leases import lease_acquire
from journal.models import Entry, EntryKind, Step, Task
from journal.outcomes import Outcome
from journal.protocols import Decision, TaskFacts
from journal.record import task_create
from journal.run import task_advance
from journal.settle import step_settle
from tests.databases import lease_expire
from tests.journal.support import (
    ChargeTool,
    Provider,
    ScriptedPlanner,
    SimulatedCrash,
    charge,
    invoice,
)

pytestmark = pytest.mark.usefixtures("committed")


def _task() -> Task:
    return task_create(kind="renewal", goal="charge two invoices")


def _expire_lease(task: Task) -> None:
    lease_expire(task.pk)


class Interrupting(ScriptedPlanner):
    """A scripted planner that, when asked with ``at`` steps decided, does ``then``."""

    def __init__(self, decisions: list[Decision], *, at: int, then: Any) -> None:
        super().__init__(decisions)
        self.at, self.then, self.done = at, then, False

    def decide(self, facts: TaskFacts) -> Decision:
        if len(facts.steps) == self.at and not self.done:
            self.done = True
            self.then(facts)
        return super().decide(facts)


def test_a_runner_that_dies_while_its_planner_decides_leaves_the_step_to_be_looked_up() -> None:
    task, provider = _task(), Provider()
    tool = ChargeTool(provider)
    first, second = invoice(), invoice()

    def die(facts: TaskFacts) -> None:
        raise SimulatedCrash

    with pytest.raises(SimulatedCrash):
        task_advance(
            task_id=task.pk,
            planner=Interrupting([charge(first), charge(second)], at=1, then=die),
            tools={"charge": tool},
        )
    step = Step.objects.get(task=task, n=1)
    # The charge happened; the settlement held back for the next record died with the run.
    assert step.state == "pending"
    assert len(provider.effects_for(step.key)) == 1
    _expire_lease(task)
    result = task_advance(
        task_id=task.pk,
        planner=ScriptedPlanner([charge(first), charge(second)]),
        tools={"charge": tool},
    )
    assert result.stopped == "finished"
    step.refresh_from_db()
    assert step.state == "done"
    settled = Entry.objects.get(step=step, kind=EntryKind.STEP_SETTLED, data__state="done")
    assert settled.data["via"] == "lookup"  # found again by its key, never sent again
    assert [
        len(provider.effects_for(s.key)) for s in Step.objects.filter(task=task, kind="call")
    ] == [1, 1]


def test_a_webhook_that_settles_the_step_the_same_way_first_changes_nothing() -> None:
    task, provider = _task(), Provider()
    tool = ChargeTool(provider)

    def webhook(facts: TaskFacts) -> None:
        step = Step.objects.get(task=task, n=1)
        effect = provider.find(step.key)
        assert effect is not None
        step_settle(step_id=step.pk, outcome=Outcome.done({"id": effect.id}), via="webhook")

    result = task_advance(
        task_id=task.pk,
        planner=Interrupting([charge(invoice()), charge(invoice())], at=1, then=webhook),
        tools={"charge": tool},
    )
    assert result.stopped == "finished"
    steps = list(Step.objects.filter(task=task, kind="call").order_by("n"))
    assert [s.state for s in steps] == ["done", "done"]
    settled = Entry.objects.filter(step=steps[0], kind=EntryKind.STEP_SETTLED)
    assert [e.data["via"] for e in settled] == ["webhook"]  # one settlement, the first report's
    # The runner's attempt is still on record, as its own entry.
    assert Entry.objects.filter(step=steps[0], kind=EntryKind.ATTEMPT_ENDED).count() == 1
    assert not Entry.objects.filter(task=task, kind=EntryKind.CONFLICT).exists()
    assert [len(provider.effects_for(s.key)) for s in steps] == [1, 1]


def test_a_webhook_that_says_otherwise_first_stops_the_next_record_and_is_a_conflict() -> None:
    task, provider = _task(), Provider()
    tool = ChargeTool(provider)

    def webhook(facts: TaskFacts) -> None:
        step = Step.objects.get(task=task, n=1)
        step_settle(step_id=step.pk, outcome=Outcome.not_done("refunded at once"), via="webhook")

    result = task_advance(
        task_id=task.pk,
        planner=Interrupting([charge(invoice()), charge(invoice())], at=1, then=webhook),
        tools={"charge": tool},
    )
    assert result.stopped == "needs_human"
    task.refresh_from_db()
    assert task.attention_code == "conflict"
    # Nothing was recorded on top of an outcome that did not stand.
    assert list(Step.objects.filter(task=task, kind="call").values_list("n", "state")) == [
        (1, "not_done")
    ]
    assert Entry.objects.filter(task=task, kind=EntryKind.CONFLICT).count() == 1
    # The number the one fence took for the record that was not made is given back.
    assert task.step_count == 1


def test_a_run_ends_in_one_statement_with_its_last_settlement() -> None:
    """The last step's settlement and the finish are one commit (journal_finish, carrying the
    settlement held back)."""
    task = _task()
    with CaptureQueriesContext(connection) as seen:
        result = task_advance(
            task_id=task.pk,
            planner=ScriptedPlanner([charge(invoice())]),
            tools={"charge": ChargeTool(Provider())},
        )
    assert result.stopped == "finished"
    sent = [
        q["sql"].split("(")[0]
        for q in seen.captured_queries
        if q["sql"].startswith("SELECT * FROM journal_")
    ]
    assert sent == [
        "SELECT * FROM journal_lease_take",
        "SELECT * FROM journal_record",
        "SELECT * FROM journal_finish",
    ]
    task.refresh_from_db()
    steps = list(Step.objects.filter(task=task).order_by("n").values_list("n", "kind", "state"))
    assert steps == [(1, "call", "done"), (2, "finish", "done")]
    assert task.status == "finished" and task.step_count == 2 and task.lease_expires_at is None


def test_a_webhook_that_says_otherwise_first_stops_the_finish_and_is_a_conflict() -> None:
    task, provider = _task(), Provider()

    def webhook(facts: TaskFacts) -> None:
        step = Step.objects.get(task=task, n=1)
        step_settle(step_id=step.pk, outcome=Outcome.not_done("refunded at once"), via="webhook")

    result = task_advance(
        task_id=task.pk,
        planner=Interrupting([charge(invoice())], at=1, then=webhook),
        tools={"charge": ChargeTool(provider)},
    )
    assert result.stopped == "needs_human"
    task.refresh_from_db()
    assert task.attention_code == "conflict" and task.status == "needs_human"
    # Not finished on top of an outcome that did not stand; the finish's number given back.
    assert list(Step.objects.filter(task=task).values_list("n", "kind", "state")) == [
        (1, "call", "not_done")
    ]
    assert Entry.objects.filter(task=task, kind=EntryKind.CONFLICT).count() == 1
    assert task.step_count == 1


def test_a_guard_that_refuses_the_next_record_still_lets_the_settlement_through() -> None:
    task, provider = _task(), Provider()
    tool = ChargeTool(provider, once_per_object=True)
    inv = invoice()
    # The same invoice twice: the second is refused by the once-only guard, in the very
    # statement that carries the first one's settlement.
    result = task_advance(
        task_id=task.pk,
        planner=ScriptedPlanner([charge(inv), charge(inv)]),
        tools={"charge": tool},
    )
    assert result.stopped == "finished"
    first, second = Step.objects.filter(task=task, kind="call").order_by("n")
    assert (first.state, second.state, second.refusal) == ("done", "not_done", "already_done")
    assert len(provider.ledger) == 1


def test_a_lease_taken_over_while_the_planner_decides_writes_nothing_more() -> None:
    task, provider = _task(), Provider()
    tool = ChargeTool(provider)

    def taken_over(facts: TaskFacts) -> None:
        _expire_lease(task)
        assert lease_acquire(task_id=task.pk, owner="another runner") is not None

    result = task_advance(
        task_id=task.pk,
        planner=Interrupting([charge(invoice()), charge(invoice())], at=1, then=taken_over),
        tools={"charge": tool},
    )
    assert result.stopped == "busy"
    # Neither the settlement nor the next record: the new holder looks the step up.
    assert list(Step.objects.filter(task=task, kind="call").values_list("n", "state")) == [
        (1, "pending")
    ]


def test_a_slow_planner_sees_the_settlement_committed_with_its_lease_stretched() -> None:
    task, provider = _task(), Provider()
    tool = ChargeTool(provider)
    seen: list[tuple[str, float]] = []

    def look(facts: TaskFacts) -> None:
        step = Step.objects.get(task=task, n=1)
        row = Task.objects.filter(pk=task.pk).values_list("lease_expires_at", flat=True).get()
        assert row is not None and step.settled_at is not None, (row, step.state)
        seen.append((step.state, (row - step.settled_at).total_seconds()))

    planner = Interrupting([charge(invoice()), charge(invoice())], at=1, then=look)
    planner.max_duration = timedelta(minutes=5)
    result = task_advance(task_id=task.pk, planner=planner, tools={"charge": tool})
    assert result.stopped == "finished"
    [(state, lease_left)] = seen
    # Durable while the model thinks, and the lease covers its longest answer: one write.
    assert state == "done"
    assert lease_left >= 5 * 60


def test_no_move_an_app_role_may_make_can_skip_the_lease_check() -> None:
    """The settlement held back travels as p_settles into the move that follows it, which
    checks the lease itself (journal_hold): no function the app's roles may call takes a
    number or a version another statement's check took, so none can be told to skip it."""
    from journal.callers import MOVES
    from journal.calls import signature

    for name in MOVES:
        arguments = {a.name for a in signature(name).arguments}
        assert not {a for a in arguments if a.startswith("fenced")}, name
