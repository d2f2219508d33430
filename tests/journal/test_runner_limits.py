"""The runner leaves nothing behind (issue 7): passing failures are retried, failures of the
planner or an adapter are handed to a human at once, runs that keep dying are bounded, and
the task's summary is the journal's account, never the planner's."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest
from django.db import connection

from journal.leases import lease_acquire
from journal.models import Entry, EntryKind, Step, Task
from journal.policy import Policy
from journal.protocols import Decision, Finish, TaskFacts
from journal.record import task_create
from journal.run import task_advance
from journal.selectors import task_list_runnable
from tests.databases import flag, lease_expire
from tests.journal.support import ChargeTool, Provider, ScriptedPlanner, charge, invoice

pytestmark = pytest.mark.usefixtures("committed")


def test_a_charge_that_was_never_sent_is_tried_again_by_the_harness_as_a_new_step() -> None:
    task = task_create(kind="renewal", goal="charge")
    tool = ChargeTool(Provider(), script=["not_sent", "ok"])
    planner = ScriptedPlanner([charge(invoice())])
    result = task_advance(
        task_id=task.pk,
        planner=planner,
        tools={"charge": tool},
        policy=Policy(transient_retry_delays=(0.0,)),
    )
    assert result.stopped == "finished"
    first, retry = Step.objects.filter(task=task, kind="call").order_by("n")
    assert first.state == "not_done" and first.outcome["transient"] is True
    assert retry.state == "done" and retry.retries == 1 and retry.args == first.args
    assert retry.decision == {"harness": "retry", "of": 1}
    assert [k for k, _ in tool.calls] == [first.key, retry.key]  # a new key: nothing was sent
    assert [e.key for e in tool.provider.ledger] == [retry.key]
    assert len(planner.asked) == 2  # the retry was the harness's, not a new decision
    finish = Step.objects.get(task=task, kind="finish")
    assert finish.detail.startswith("1 done. Done: charge for ")


def test_a_retry_waits_for_its_time_and_the_task_is_picked_up_then() -> None:
    task = task_create(kind="renewal", goal="charge")
    tool = ChargeTool(Provider(), script=["not_sent", "ok"])
    planner = ScriptedPlanner([charge(invoice())])
    policy = Policy(transient_retry_delays=(0.3,))
    first = task_advance(task_id=task.pk, planner=planner, tools={"charge": tool}, policy=policy)
    assert (first.stopped, first.steps_performed) == ("waiting", 1)
    assert Step.objects.get(task=task, n=1).state == "not_done"  # never sent: retried later
    task.refresh_from_db()
    assert task.status == "waiting" and task.wake_at is not None
    end = time.monotonic() + 10
    while not task_list_runnable().filter(pk=task.pk).exists():
        assert time.monotonic() < end, "the retry never came due"
        time.sleep(0.05)
    result = task_advance(task_id=task.pk, planner=planner, tools={"charge": tool}, policy=policy)
    assert result.stopped == "finished"
    assert Step.objects.get(task=task, n=2).state == "done"


def test_when_the_retries_are_used_up_the_planner_decides_and_the_summary_says_not_done() -> None:
    task = task_create(kind="renewal", goal="charge")
    tool = ChargeTool(Provider(), script=["not_sent", "not_sent"])
    planner = ScriptedPlanner([charge(invoice())])
    task_advance(
        task_id=task.pk,
        planner=planner,
        tools={"charge": tool},
        policy=Policy(transient_retry_delays=(0.0,)),
    )
    finish = Step.objects.get(task=task, kind="finish")
    assert finish.outcome["planner_summary"] == "all done"  # what the planner believed
    # What the journal knows: one charge, not done (its retry stands for it).
    assert finish.detail.startswith("1 not done. Not done: charge for ")
    assert "the request was never sent" in finish.detail


class Raises:
    max_duration = ScriptedPlanner([]).max_duration

    def decide(self, facts: TaskFacts) -> Decision:
        raise ZeroDivisionError("the model adapter divided by zero")


def test_a_planner_that_raises_anything_hands_the_task_over_under_its_lease() -> None:
    task = task_create(kind="renewal", goal="g")
    result = task_advance(task_id=task.pk, planner=Raises(), tools={})
    assert result.stopped == "needs_human"
    task.refresh_from_db()
    assert task.attention_code == "planner_failed"
    assert (
        task.attention == "the planner failed: ZeroDivisionError: the model adapter divided by zero"
    )
    # Recorded by the lease holder, which then gave the lease back cleanly.
    flagged = Entry.objects.get(task=task, kind=EntryKind.TASK_FLAGGED)
    assert flagged.data["code"] == "planner_failed"
    assert task.lease_token == 1 and task.lease_expires_at is None and task.failed_runs == 0


class BrokenGuard(ChargeTool):
    def guard(self, args: Mapping[str, Any]) -> str | None:
        raise RuntimeError("adapter bug")


def test_an_adapter_that_raises_hands_the_task_over_and_sends_nothing() -> None:
    task = task_create(kind="renewal", goal="g")
    tool = BrokenGuard(Provider())
    result = task_advance(
        task_id=task.pk, planner=ScriptedPlanner([charge(invoice())]), tools={"charge": tool}
    )
    assert result.stopped == "needs_human"
    task.refresh_from_db()
    assert task.attention_code == "harness_failed" and "RuntimeError: adapter bug" in task.attention
    assert tool.calls == [] and not Step.objects.filter(task=task).exists()


def test_runs_that_keep_dying_are_bounded_and_handed_to_a_human() -> None:
    task = task_create(kind="renewal", goal="poison")
    policy = Policy(max_failed_runs=3)
    for _ in range(3):
        # A run that dies without a word (SIGKILL, a lost database): its lease just expires.
        assert lease_acquire(task_id=task.pk, owner="doomed", seconds=30) is not None
        lease_expire(task.pk)
    planner = ScriptedPlanner([charge(invoice())])
    result = task_advance(task_id=task.pk, planner=planner, tools={}, policy=policy)
    assert result.stopped == "needs_human" and planner.asked == []
    task.refresh_from_db()
    assert task.attention_code == "run_failures"
    assert task.attention.startswith("the last 3 runs of this task ended without finishing")
    assert not task_list_runnable().filter(pk=task.pk).exists()


def test_a_run_that_ends_cleanly_clears_the_count() -> None:
    task = task_create(kind="renewal", goal="fine")
    assert lease_acquire(task_id=task.pk, owner="doomed", seconds=30) is not None
    lease_expire(task.pk)
    task_advance(task_id=task.pk, planner=ScriptedPlanner([Finish("ok")]), tools={})
    assert Task.objects.get(pk=task.pk).failed_runs == 0


class Slow:
    """A planner whose worst case is long (a model with retries): the runner's lease must
    cover it while it thinks."""

    def __init__(self) -> None:
        from datetime import timedelta

        self.max_duration = timedelta(seconds=120)
        self.lease_left: float | None = None

    def decide(self, facts: TaskFacts) -> Decision:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT extract(epoch FROM lease_expires_at - now()) FROM journal_task "
                "WHERE id = %s",
                [facts.task_id],
            )
            self.lease_left = float(cursor.fetchone()[0])
        return Finish("thought about it")


def test_the_lease_is_stretched_to_cover_the_planners_worst_case() -> None:
    task = task_create(kind="renewal", goal="think")
    planner = Slow()
    task_advance(task_id=task.pk, planner=planner, tools={})
    assert planner.lease_left is not None and planner.lease_left > 120


def test_a_finish_decided_while_the_task_was_handed_to_a_person_writes_nothing() -> None:
    """A report that contradicts the journal (a webhook, under no lease) flags the task while
    the planner decides; the finish is not written over it, and the task stays with the
    person (before, the finish step was written and the transition silently skipped)."""
    task = task_create(kind="renewal", goal="charge")

    class FlaggedWhileDeciding(ScriptedPlanner):
        def decide(self, facts: TaskFacts) -> Decision:
            flag(task.pk, "conflict", "a webhook disagreed")
            return Finish("all done")

    result = task_advance(task_id=task.pk, planner=FlaggedWhileDeciding([]), tools={})
    assert result.stopped == "needs_human"
    task.refresh_from_db()
    assert task.status == "needs_human" and task.attention_code == "conflict"
    assert not Step.objects.filter(task=task).exists()
    assert task.lease_expires_at is None  # given back all the same
