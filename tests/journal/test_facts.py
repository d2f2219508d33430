"""A task's facts as the runner keeps them between its writes (journal/protocols.py: TaskFacts):
a question asked at every step is folded over the steps once, not over the whole task again."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from uuid import uuid4

from journal.models import Step, Task
from journal.moves import _live
from journal.outcomes import Outcome, StepState
from journal.protocols import StepFact, TaskFacts
from journal.view import View


def step(n: int, state: StepState = StepState.DONE) -> StepFact:
    return StepFact(n=n, tool="pay", args={"n": n}, state=state, detail="", key=f"k{n}")


def test_a_fold_over_appended_facts_adds_each_step_once_and_agrees_with_a_fresh_fold() -> None:
    seen: list[int] = []

    def add(total: int, s: StepFact) -> int:
        seen.append(s.n)
        return total + s.n

    facts = TaskFacts(task_id="t", kind="k", goal="g", refs={}, steps=[step(1), step(2)])
    assert facts.fold("sum", add, 0) == 3
    for n in range(3, 501):
        facts = facts.appended(step(n))
        assert facts.fold("sum", add, 0) == n * (n + 1) // 2
    assert seen == list(range(1, 501))  # 500 steps folded once each, not 125,000 times
    assert [s.n for s in facts.steps] == list(range(1, 501))

    fresh = TaskFacts(task_id="t", kind="k", goal="g", refs={}, steps=list(facts.steps))
    assert fresh.fold("sum", add, 0) == facts.fold("sum", add, 0)
    assert len(seen) == 1000  # facts made afresh fold from the start


def test_facts_replaced_any_other_way_fold_from_the_start() -> None:
    facts = TaskFacts(task_id="t", kind="k", goal="g", refs={}, steps=[step(1)])
    assert facts.fold("live", _live, 0) == 0
    # The same first step, now unknown (a re-read after someone else wrote): not remembered.
    changed = replace(facts, steps=[step(1, StepState.UNKNOWN)])
    assert changed.fold("live", _live, 0) == 1
    assert facts.fold("live", _live, 0) == 0
    # A name is its own fold: another question over the same steps starts from its own start.
    assert changed.appended(step(2, StepState.PENDING)).fold("live", _live, 0) == 2
    assert changed.fold("count", lambda c, s: c + 1, 10) == 11


def test_the_runners_view_carries_its_folds_as_each_step_settles() -> None:
    """The runner's picture of its task (journal/view.py) appends each settled step to its
    facts: what was folded over the steps before is not folded again."""
    seen: list[int] = []

    def add(total: int, s: StepFact) -> int:
        seen.append(s.n)
        return total + 1

    task = Task(id=uuid4(), kind="k", goal="g", refs={}, step_count=2)
    facts = TaskFacts(task_id=str(task.id), kind="k", goal="g", refs={}, steps=[step(1), step(2)])
    view = View(task=task, facts=facts, now=datetime.now(UTC))
    assert view.facts.fold("count", add, 0) == 2
    for n in (3, 4, 5):
        settled = Step.written(id=n, task_id=task.id, n=n, tool="pay", args={}, key=f"k{n}")
        assert view.after(settled, Outcome.done({"id": n}), approval_used=False) is view
        assert view.facts.fold("count", add, 0) == n
    assert seen == [1, 2, 3, 4, 5] and task.step_count == 5
