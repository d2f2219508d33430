"""What a run did to its steps, as the moves it made returned it (docs/design.md §14).

Each move of a run is one journal function, and it returns what it committed: the step it
recorded (its number and key), whether a settlement stood, whether a step is unknown for
the first time. The runner notes one :class:`StepEvent` a thing that happened, on its lease
(``Lease.events``), from those rows, and hands the list back with the run's result
(``journal.run.Advance.events``): nothing is read back from the journal to tell it. The
journal's core writes no log and knows no metrics library; agentops/telemetry/steps.py
turns the events into log lines and counters.

An event is noted only once the statement that wrote it has returned: a move that raised,
or found its lease taken over, wrote nothing, and notes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any
from uuid import UUID

from journal.models import Step


@dataclass(frozen=True)
class StepEvent:
    """One thing that happened to a step."""

    what: str
    """``recorded``, ``refused``, ``attempt_started``, ``attempt_ended``, ``lookup``,
    ``settled`` (done or not done) or ``unknown``."""
    task_id: UUID
    step_key: str
    tool: str
    state: str
    """The step's state this event leaves it in (``pending`` while an attempt is out)."""
    step_id: int | None = None
    undo: bool = False
    """The step undoes another (a saga's compensation, or an effect a rule offsets)."""
    attempt: int | None = None
    via: str = ""
    code: str = ""
    """A refusal's code."""
    result: str = ""
    """A lookup's finding."""
    detail: str = ""
    seconds: float | None = None
    """An ended attempt's duration: the tool's call, as the runner timed it."""
    unknown_for: float | None = None
    """A settlement's time since the step was first unknown (None: it never was)."""
    maybe_unknown: bool = False
    """A settlement of a step that may have been unknown before (it was attempted again or
    looked up): how long it was is found from the journal (the rare step costs a query, the
    usual one none)."""
    first_unknown: bool = False
    """An ``unknown`` event that is the step's first."""

    def fields(self) -> dict[str, Any]:
        """The ``extra`` of its log line: every line about a step names these four."""
        facts: dict[str, Any] = {
            "task_id": str(self.task_id),
            "step_key": self.step_key,
            "tool": self.tool,
            "state": self.state,
            "event": self.what,
        }
        for name in ("attempt", "via", "code", "result"):
            value = getattr(self, name)
            if value not in (None, ""):
                facts[name] = value
        if self.seconds is not None:
            facts["seconds"] = round(self.seconds, 3)
        if self.unknown_for is not None:
            facts["unknown_seconds"] = round(self.unknown_for, 3)
        if self.undo:
            facts["undo"] = True
        return facts


def step_event(what: str, step: Step, *, state: str | None = None, **facts: Any) -> StepEvent:
    """The event ``what`` about ``step`` (as the runner holds it), leaving it in ``state``
    (the step's own, unless given)."""
    undo = step.offsets_id is not None or getattr(step, "offsets_n", None) is not None
    return StepEvent(
        what,
        task_id=step.task_id,
        step_key=step.key,
        tool=step.tool,
        state=str(state if state is not None else step.state),
        step_id=step.pk,
        undo=undo,
        **facts,
    )


def held_event(event: StepEvent, settled: str | None) -> StepEvent | None:
    """What a settlement held back (``event``: the step settled by its attempt) turned out
    to be once a move wrote it (journal_hold's ``settled``): the settlement itself, or, when
    a report had settled the step first (``repeat``, ``conflict``), only the attempt that
    ended. None: it was not written."""
    if settled == "settled":
        return event
    if settled in ("repeat", "conflict"):
        return replace(event, what="attempt_ended", via="", maybe_unknown=False)
    return None
