"""A task's whole history in one list, oldest first: what its steps did, what people and
clients decided, who held it and what notes they left, what it notified and what the
provider audit found of it — each in plain
words, with who and which step. Pure: the task page's rows in, happenings out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from agentops.audit.models import Finding
from agentops.models import CoordinationKind, TaskCoordination
from agentops.notifications.models import Delivery
from agentops.operators.audit_pages import summary
from agentops.operators.history import DONE_WORDS
from agentops.operators.readable import money_of
from agentops.operators.timeline import Event, describe

# The longest story a page tells (its newest happenings); the steps' own tables keep the rest.
STORY_MAX = 1000


@dataclass(frozen=True)
class Happening:
    at: datetime
    what: str
    """In plain words."""
    sort: str
    """``step``, ``decision``, ``task``, ``notification``, ``finding``, ``claim`` (claimed,
    released, taken over) or ``note``."""
    who: str = ""
    n: int | None = None


def _task_words(e: Event) -> str:
    d = e.data
    if e.kind == "task_created":
        return "The task was started" + (f": {d['goal']}" if d.get("goal") else "")
    if e.kind == "task_waiting":
        why = f" ({d['reason']})" if d.get("reason") else ""
        return f"It waits before going on{why}"
    if e.kind == "task_resumed":
        return "It can go on again" + (f" ({d['reason']})" if d.get("reason") else "")
    if e.kind == "task_flagged":
        why = d.get("reason") or ""
        return "Handed to a person" + (f": {why}" if why else "")
    if e.kind == "task_finished":
        ended = {"compensated": "compensated: its done effects undone"}.get(str(d.get("to")), "")
        return (
            "The task ended"
            + (f", {ended}" if ended else "")
            + (f": {d['reason']}" if d.get("reason") else "")
        )
    if e.kind == "task_cancelled":
        return "The task was cancelled" + (f": {d['reason']}" if d.get("reason") else "")
    if e.kind == "approval_requested":
        amount = money_of(d.get("args"))
        call = f"{d.get('tool', 'a step')}{f' of {amount}' if amount else ''}"
        return f"Held {call} for a person's approval" + (
            f": {d['reason']}" if d.get("reason") else ""
        )
    if e.kind == "approval_decided":
        decision = str(d.get("decision", "decided"))
        said = DONE_WORDS.get(decision, decision)
        return f"The held {d.get('tool') or 'step'} was {said}" + (
            f": “{d['reason']}”" if d.get("reason") else ""
        )
    if e.kind == "saga_unwinding":
        return "The saga will not complete: its done steps are undone, newest first"
    if e.kind == "operator_action":
        action = str(d.get("action", "acted"))
        said = DONE_WORDS.get(action, action.replace("_", " "))
        return f"{said[:1].upper()}{said[1:]}" + (f": “{d['reason']}”" if d.get("reason") else "")
    words, _ = describe(e)
    return words[:1].upper() + words[1:]


def task_story(
    entries: Sequence[tuple[int | None, Event]],
    *,
    n_of: Mapping[int, int],
    tool_of: Mapping[int, str],
    corrected: set[int],
    deliveries: Sequence[Delivery] = (),
    findings: Sequence[Finding] = (),
    coordination: Sequence[TaskCoordination] = (),
) -> list[Happening]:
    """Every happening of the task, oldest first (the newest ``STORY_MAX``)."""
    told: list[Happening] = []
    for step_id, e in entries:
        n = n_of.get(step_id) if step_id is not None else None
        if e.kind == "operator_action" or e.kind.startswith(("approval_", "task_")):
            sort = "decision" if e.actor and e.kind != "task_created" else "task"
            told.append(Happening(e.at, _task_words(e), sort, e.actor, n))
            continue
        if n is None:
            told.append(Happening(e.at, _task_words(e), "task", e.actor))
            continue
        words, _ = describe(e, sent=n not in corrected)
        told.append(
            Happening(e.at, f"Step {n} ({tool_of.get(n, '')}): {words}", "step", e.actor, n)
        )
    for d in deliveries:
        told.append(Happening(d.created_at, f"Notification “{d.event}” to be sent", "notification"))
        if d.settled_at is not None:
            tries = f"after {d.attempts} attempt{'s' if d.attempts != 1 else ''}"
            said = d.get_state_display()
            told.append(
                Happening(
                    d.settled_at, f"Notification “{d.event}”: {said}, {tries}", "notification"
                )
            )
    for f in findings:
        n = n_of.get(f.step_id) if f.step_id is not None else None
        told.append(
            Happening(f.found_at, f"The provider audit found: {summary(f)}", "finding", "", n)
        )
        if f.resolved_at is not None:
            told.append(
                Happening(
                    f.resolved_at,
                    f"The audit's finding was resolved: “{f.resolution}”",
                    "decision",
                    f.resolved_by,
                    n,
                )
            )
    for c in coordination:
        if c.kind == CoordinationKind.NOTED:
            told.append(Happening(c.at, f"Note: “{c.text}”", "note", c.actor))
        elif c.kind == CoordinationKind.TAKEN_OVER:
            told.append(Happening(c.at, f"Took the task over from {c.was}", "claim", c.actor))
        else:
            said = CoordinationKind(c.kind).label
            told.append(Happening(c.at, said[:1].upper() + said[1:], "claim", c.actor))
    told.sort(key=lambda h: h.at)
    return told[-STORY_MAX:]
