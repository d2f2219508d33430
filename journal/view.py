"""The runner's picture of its task between its own writes (docs/design.md §14).

Taking the lease returns the task's row; the runner keeps its facts and appends each step
as it settles, so a plain step costs its record and its settlement and not a read more. A
gap in the versions it wrote shows that someone else (a webhook, a person) wrote in
between, and it reads the task again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models.functions import Now

from journal.leases import Lease, settle_held
from journal.models import Step, Task
from journal.moves import TaskRow
from journal.outcomes import Outcome, StepState
from journal.protocols import StepFact, TaskFacts
from journal.selectors import task_facts


def task_from_row(row: dict[str, Any]) -> Task:
    """A Task from a raw ``RETURNING journal_task.*`` row, converted as a query would (the
    driver hands jsonb over as text; JSONField parses it). Columns are the fields' names
    here: the task has no foreign keys."""
    for field in Task._meta.concrete_fields:
        convert = getattr(field, "from_db_value", None)
        if convert is not None and field.attname in row:
            row[field.attname] = convert(row[field.attname], None, connection)
    return Task(**row)


@dataclass
class View:
    """The runner's picture of its task between its own writes: read once, then kept up to
    date from what it writes itself. Read again whenever a write of its own shows, by the
    task's version, that someone else wrote in between (a webhook, a person), or after
    anything but the plain record → call → settle of one step."""

    task: Task
    facts: TaskFacts
    now: datetime

    @classmethod
    def load(cls, lease: Lease) -> View:
        settle_held(lease)  # what it reads includes the settlement the runner held back
        if lease.task is not None:
            # The first read comes with the lease itself: its row, as taking it left it.
            row, lease.task = dict(lease.task), None
            now_ = row.pop("db_now")
            task = task_from_row(row)
            task._state.adding, task._state.db = False, "default"
            task.db_now = now_  # type: ignore[attr-defined]
        else:
            task = Task.objects.annotate(db_now=Now()).get(pk=lease.task_id)
        facts = task_facts(task=task)
        lease.read(task.version)
        return cls(task=task, facts=facts, now=task.db_now)  # type: ignore[attr-defined]

    def row(self) -> TaskRow:
        task = self.task
        return TaskRow(task.status, task.wake_at, task.unwinding, task.step_count)

    def current(self, lease: Lease) -> bool:
        """Whether every write since the read was this runner's own (each found the task at
        the version the runner's last write left it)."""
        return not lease.interrupted

    def after(self, step: Step, outcome: Outcome, *, approval_used: bool) -> View | None:
        """The view once ``step`` settled with ``outcome``, or None to read it again."""
        if outcome.state not in (StepState.DONE, StepState.NOT_DONE) or approval_used:
            return None
        if outcome.data.get("transient"):
            return None  # its retry is timed from when it settled: read that back
        if getattr(step, "offsets_n", None) is not None:
            return None  # an undo: what it offsets changed too
        fact = StepFact(
            n=step.n,
            tool=step.tool,
            args=step.args,
            state=StepState(outcome.state),
            detail=outcome.detail,
            key=step.key,
            guard=step.guard,
            evidence=dict(outcome.data.get("evidence") or {}),
            retries=step.retries,
            undo_tool=step.undo_tool,
            misconfigured=bool(outcome.data.get("misconfigured")),
        )
        self.facts = self.facts.appended(fact)
        self.task.step_count = step.n
        return self
