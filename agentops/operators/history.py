"""Who decided what on a task, when and why: every person's or client's decision (approve,
reject, compensate, resume, cancel, reconcile, resolve, correct, and what the installed apps
add), read from the journal's entries, for the task's history and beside the step each is
about. Pure: entries and approvals in, rows out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agentops.operators.timeline import Event
from journal.models import Approval

# What each action is called in a sentence ("approved by ada").
DONE_WORDS = {
    "approved": "approved",
    "rejected": "rejected",
    "expired": "expired (nobody decided in time)",
    "resume": "resumed",
    "cancel": "cancelled",
    "compensate": "had it compensate",
    "reconcile": "had it reconciled now",
    "resolve": "settled it by hand",
    "correct": "corrected it",
    "retry_payment": "retried the payment",
    "created": "started the task",
}


@dataclass(frozen=True)
class Decision:
    """One decision: who, when, what, why; for an approval, the exact call and its digest."""

    at: datetime
    actor: str
    action: str
    step: int | None = None
    reason: str = ""
    tool: str = ""
    args: Mapping[str, Any] | None = None
    digest: str = ""
    evidence: Mapping[str, Any] | None = None
    detail: str = ""
    led_to: int | None = None
    """The step it led to (an approval used by a step, a correction recorded as one)."""

    @property
    def words(self) -> str:
        return DONE_WORDS.get(self.action, self.action.replace("_", " "))

    @property
    def by_a_person(self) -> bool:
        return bool(self.actor)


@dataclass(frozen=True)
class History:
    decisions: list[Decision] = field(default_factory=list)
    by_step: Mapping[int, list[Decision]] = field(default_factory=dict)


def task_history(
    entries: Sequence[tuple[int | None, Event]],
    *,
    n_of: Mapping[int, int],
    approvals: Sequence[Approval],
) -> History:
    """The task's decisions, oldest first, and those about each step (by its number)."""
    used_by = {a.pk: n_of.get(a.used_by_id) for a in approvals if a.used_by_id is not None}
    by_pk = {a.pk: a for a in approvals}
    decisions: list[Decision] = []
    for step_id, e in entries:
        step = n_of.get(step_id) if step_id is not None else None
        d = e.data
        if e.kind == "operator_action":
            action = str(d.get("action", "acted"))
            extra = ""
            if d.get("was"):
                extra = f"was: {str(d['was']).replace('_', ' ')}"
            decisions.append(
                Decision(
                    e.at,
                    e.actor,
                    action,
                    step,
                    str(d.get("reason", "")),
                    evidence=d.get("evidence") if isinstance(d.get("evidence"), dict) else None,
                    detail=extra,
                    led_to=d.get("correction") if isinstance(d.get("correction"), int) else None,
                )
            )
        elif e.kind == "approval_decided":
            # The approval's own row says what was held, for entries older than their args.
            row = by_pk.get(d.get("approval"))  # type: ignore[arg-type]
            args = d.get("args") if isinstance(d.get("args"), dict) else None
            decisions.append(
                Decision(
                    e.at,
                    e.actor,
                    str(d.get("decision", "")),
                    None,
                    str(d.get("reason", "")),
                    tool=str(d.get("tool") or (row.tool if row else "")),
                    args=args if args is not None else (row.args if row else None),
                    digest=str(d.get("digest") or (row.digest if row else "")),
                    led_to=used_by.get(row.pk) if row else None,
                )
            )
        elif e.kind == "task_created" and e.actor:
            decisions.append(Decision(e.at, e.actor, "created", None, str(d.get("goal", ""))))
    by_step: dict[int, list[Decision]] = defaultdict(list)
    for decision in decisions:
        for n in {decision.step, decision.led_to}:
            if n is not None:
                by_step[n].append(decision)
    return History(decisions=decisions, by_step=dict(by_step))
