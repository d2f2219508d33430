"""Reconcile before retry (docs/design.md §5): look up by key, retry only with a live key."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from journal.models import Entry, EntryKind, Step, Task
from journal.outcomes import Outcome
from journal.policy import Policy
from journal.record import task_create
from journal.run import Advance, task_advance
from journal.selectors import task_facts, task_list_runnable
from journal.settle import step_settle
from tests.journal.support import ChargeTool, Provider, ScriptedPlanner, charge, invoice

pytestmark = pytest.mark.usefixtures("committed")

NOW = Policy(lookup_schedule=(0.0, 0.0, 0.0))  # reconcile at once, three rounds at most


def _advance(
    tool: ChargeTool, policy: Policy = NOW, planner: ScriptedPlanner | None = None
) -> tuple[Task, Advance]:
    task = task_create(kind="renewal", goal="charge")
    result = task_advance(
        task_id=task.pk,
        planner=planner or ScriptedPlanner([charge(invoice())]),
        tools={"charge": tool},
        policy=policy,
    )
    task.refresh_from_db()
    return task, result


def _run(tool: ChargeTool, policy: Policy = NOW, planner: ScriptedPlanner | None = None) -> Task:
    return _advance(tool, policy, planner)[0]


def _step(task: Task) -> Step:
    return Step.objects.get(task=task, n=1)


def test_unknown_then_found_by_lookup_is_done_without_a_retry() -> None:
    tool = ChargeTool(Provider(), script=["timeout_after"])
    task = _run(tool)
    step = _step(task)
    assert step.state == "done"
    assert step.outcome["evidence"]["id"] == tool.provider.effects_for(step.key)[0].id
    assert len(tool.calls) == 1 and tool.lookups == [step.key]
    assert len(tool.provider.effects_for(step.key)) == 1
    assert task.status == "finished"
    lookup = Entry.objects.get(step=step, kind=EntryKind.LOOKUP)
    assert lookup.data["found"] is True


def test_unknown_not_found_with_a_live_key_is_retried_with_the_same_key() -> None:
    tool = ChargeTool(Provider(), script=["timeout_before", "ok"])
    task = _run(tool)
    step = _step(task)
    assert step.state == "done"
    assert [k for k, _ in tool.calls] == [step.key, step.key]
    assert len(tool.provider.effects_for(step.key)) == 1
    assert step.attempts == 2


def test_a_refused_connection_after_an_attempt_that_acted_is_unknown_not_not_done() -> None:
    # The first attempt reached the provider; the retry's refused connection proves nothing.
    tool = ChargeTool(
        Provider(),
        script=["timeout_after", "not_sent", "not_sent", "not_sent"],
        lookup_default="lagging",
    )
    task = _run(tool)
    step = _step(task)
    assert len(tool.provider.effects_for(step.key)) == 1
    assert step.state == "unknown"
    assert "earlier attempt may have reached it" in step.detail
    assert task.status == "needs_human"


def test_a_failed_lookup_with_a_live_key_still_retries_safely() -> None:
    tool = ChargeTool(Provider(), script=["timeout_after", "ok"], lookup_script=["down"])
    task = _run(tool)
    step = _step(task)
    assert step.state == "done"
    # The retry carried the key, so the provider replayed the first effect.
    assert len(tool.provider.effects_for(step.key)) == 1
    assert Entry.objects.get(step=step, kind=EntryKind.LOOKUP).data["result"] == "unknown"


def test_unknown_not_found_with_a_dead_key_is_never_retried_and_needs_a_human() -> None:
    # The provider forgot the key at once; a retry would charge a second time.
    provider = Provider(key_lifetime=0.0)
    tool = ChargeTool(
        provider, key_lifetime=timedelta(0), script=["timeout_after"], lookup_script=["lagging"]
    )
    task, result = _advance(tool)
    step = _step(task)
    assert step.state == "unknown"
    assert len(tool.calls) == 1
    assert len(provider.effects_for(step.key)) == 1
    assert task.status == "needs_human"
    assert "no longer remembers its key" in task.attention
    assert step.next_check_at is None
    assert result.stopped == "needs_human"


def test_a_dead_key_is_looked_up_again_while_the_providers_search_may_lag() -> None:
    provider = Provider(key_lifetime=0.0)
    tool = ChargeTool(
        provider,
        key_lifetime=timedelta(0),
        lookup_lag=timedelta(seconds=0.3),
        script=["timeout_after"],
        lookup_script=["lagging"] * 100,
    )
    policy = Policy(lookup_schedule=(0.0,) + (0.1,) * 50)
    task, result = _advance(tool, policy)
    # Inside the lag: the step waits for another lookup rather than for a human.
    assert result.stopped == "waiting"
    assert task.status == "waiting"
    assert _step(task).lookups == 1
    # Run it as the scheduler would, each time its lookup is due, until it stops waiting.
    deadline = time.monotonic() + 10
    while Task.objects.get(pk=task.pk).status == "waiting" and time.monotonic() < deadline:
        task_advance(
            task_id=task.pk, planner=ScriptedPlanner([]), tools={"charge": tool}, policy=policy
        )
        time.sleep(0.02)
    task.refresh_from_db()
    step = _step(task)
    assert task.status == "needs_human"
    assert "no longer remembers its key" in task.attention
    assert step.state == "unknown" and step.lookups >= 2
    # Looked up again and again, never retried: one call, one effect.
    assert len(tool.calls) == 1
    assert len(provider.effects_for(step.key)) == 1


def test_reconciliation_is_bounded_then_a_human_is_asked() -> None:
    tool = ChargeTool(Provider(), script=["rate_limited"] * 10)
    task = _run(tool)
    step = _step(task)
    assert step.state == "unknown"
    assert task.status == "needs_human"
    assert "3 reconciliation rounds" in task.attention
    # The first attempt and one retry per round, all with the same key.
    assert [k for k, _ in tool.calls] == [step.key] * 4
    assert step.lookups == 3


def test_an_unknown_step_waits_for_its_lookup_and_the_task_is_not_runnable_until_due() -> None:
    tool = ChargeTool(Provider(), script=["timeout_after"])
    task, result = _advance(tool, Policy(lookup_schedule=(3600.0,)))
    step = _step(task)
    assert result.stopped == "waiting"
    assert task.status == "waiting" and step.state == "unknown"
    assert step.next_check_at is not None
    assert not task_list_runnable().filter(pk=task.pk).exists()
    assert "do not start another charge" in task_facts(task=task).steps[0].result_text()


def test_a_report_from_outside_settles_a_waiting_step_and_wakes_its_task() -> None:
    tool = ChargeTool(Provider(), script=["timeout_after"])
    task = _run(tool, Policy(lookup_schedule=(3600.0,)))
    step = _step(task)
    effect = tool.provider.effects_for(step.key)[0]
    assert step_settle(step_id=step.pk, outcome=Outcome.done({"id": effect.id}), via="webhook")
    assert task_list_runnable().filter(pk=task.pk).exists()
    result = task_advance(
        task_id=task.pk, planner=ScriptedPlanner([]), tools={"charge": tool}, policy=NOW
    )
    assert result.stopped == "finished"
    assert len(tool.calls) == 1 and tool.lookups == []


def test_a_refusal_is_not_done_and_the_planner_may_decide_again() -> None:
    inv = invoice()
    tool = ChargeTool(Provider(), script=["refuse", "ok"])
    planner = ScriptedPlanner([charge(inv), charge(inv)])
    task = _run(tool, planner=planner)
    first, second = Step.objects.filter(task=task, kind="call").order_by("n")
    assert first.state == "not_done" and "402" in first.detail
    assert second.state == "done"
    assert tool.provider.effects_for(first.key) == []
    assert len(tool.provider.effects_for(second.key)) == 1
