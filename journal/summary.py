"""What a task says it did, built from the journal's facts (docs/design.md §8).

A planner's own account ("4 reminders sent") is kept for the record but never shown as the
truth: the summary a task finishes with is written here, from its steps' states and
evidence, so it cannot disagree with the journal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from journal.outcomes import StepState
from journal.protocols import StepFact


def _label(step: StepFact) -> str:
    return step.tool + (f" for {step.guard.split(':', 1)[-1]}" if step.guard else "")


# The identifiers that best name an effect, in order: what a person would look up.
EVIDENCE_NAMES = ("charge", "refund", "payment_intent", "message", "id", "reference")


def evidence_label(evidence: Mapping[str, Any]) -> str:
    """``charge ch_…``: the most telling identifier in a step's evidence."""
    for name in EVIDENCE_NAMES:
        if evidence.get(name):
            return f"{name} {evidence[name]}"
    # A tool of an app names its evidence its own way: its first field that has a value.
    named = next((k for k, v in evidence.items() if v not in (None, "", [], {})), None)
    return f"{named} {evidence[named]}" if named is not None else "no evidence recorded"


def superseded(steps: Sequence[StepFact]) -> set[int]:
    """Steps a later harness retry took over (same tool and arguments, one retry further)."""
    taken: set[int] = set()
    for later in steps:
        if later.retries == 0:
            continue
        earlier = next(
            (
                s
                for s in reversed(steps)
                if s.n < later.n
                and s.tool == later.tool
                and s.args == later.args
                and s.retries == later.retries - 1
            ),
            None,
        )
        if earlier is not None:
            taken.add(earlier.n)
    return taken


def task_summary(steps: Sequence[StepFact]) -> str:
    """``2 done, 1 not done. Done: …. Not done: ….`` — every decided call, in groups: done,
    done and undone since (with what undid it), not done, unknown, refused."""
    if not steps:
        return "Nothing was done: no step was decided."
    groups: dict[str, list[str]] = {
        "done": [],
        "undone": [],
        "not done": [],
        "unknown": [],
        "refused": [],
    }
    skip = superseded(steps)
    undoers = {s.offsets: s for s in steps if s.offsets is not None and s.state == StepState.DONE}
    for step in steps:
        if step.n in skip or (step.offsets is not None and step.state == StepState.DONE):
            continue  # a retry stands for what it retried; a done undo, for its effect below
        label = _label(step)
        if step.state == StepState.DONE and step.offset:
            undo = undoers.get(step.n)
            by = f" by {undo.tool} ({evidence_label(undo.evidence)})" if undo else ""
            groups["undone"].append(f"{label} ({evidence_label(step.evidence)}), undone{by}")
        elif step.state == StepState.DONE:
            groups["done"].append(f"{label} ({evidence_label(step.evidence)})")
        elif step.state == StepState.NOT_DONE and step.refusal:
            # The refusal's first clause is the fact; the rest told the model what to do.
            groups["refused"].append(f"{label} — {step.detail.split('; ')[0]}")
        elif step.state == StepState.NOT_DONE:
            groups["not done"].append(f"{label} — {step.detail}")
        else:
            groups["unknown"].append(f"{label} — being checked (reference {step.key})")
    counts = ", ".join(f"{len(items)} {name}" for name, items in groups.items() if items)
    details = " ".join(
        f"{name.capitalize()}: {'; '.join(items)}." for name, items in groups.items() if items
    )
    return f"{counts}. {details}"


def fell_short(steps: Sequence[StepFact]) -> bool:
    """Whether some decided call did not happen (and no retry stands for it): what operators
    filter as "failed", with the summary saying which and why. A step not known to have
    happened is never counted as failed."""
    skip = superseded(steps)
    return any(s.state == StepState.NOT_DONE and s.n not in skip for s in steps)
