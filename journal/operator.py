"""What a person may do to a task (docs/design.md §7, §8): each decision is one journal
function, which checks it as a person's would be checked and records it with who and why in
the same statement, or refuses it with a sentence and writes nothing
(:class:`~journal.calls.Refused`, also known as ``TransitionRefused``). The ``*_refusal``
functions give that sentence without acting, for the pages to show beside a button a person
may not press: the same function the move itself asks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from uuid import UUID

from journal.calls import call, call_all
from journal.models import Step, TaskStatus
from journal.outcomes import StepState, evidence_missing
from journal.protocols import Tool
from journal.status import TransitionRefused
from journal.summary import evidence_label


def task_resume(*, task_id: UUID, actor: str, reason: str) -> TaskStatus:
    """Let a task that needs a human go on, and say what it is now.

    A task that had ended (a later report contradicted it) goes back to how it ended:
    finished means finished. Any other goes back to runnable, its run-failure count cleared,
    and an unknown step nobody was looking up any more gets one more lookup at once (which may
    hand it back, if that still settles nothing).
    """
    return TaskStatus(call("journal_task_resume", task=task_id, actor=actor, reason=reason))


def task_cancel(*, task_id: UUID, actor: str, reason: str) -> None:
    """Stop a task that needs a human. Refused while one of its steps may still have acted:
    that step must be settled (reconciled, or resolved by hand) first, or nobody would ever
    find out what happened (:func:`cancel_refusal`)."""
    call("journal_task_cancel", task=task_id, actor=actor, reason=reason)


# --- What is refused, and why: the moves' own rule, for the pages that offer them ------------


def undoable(steps: Iterable[Step]) -> list[Step]:
    """The task's done effects that declared an undo, are not undos themselves and were not
    undone, newest step first: what compensating it would undo."""
    found = [
        s
        for s in steps
        if s.state == StepState.DONE
        and s.offset_by_id is None
        and s.offsets_id is None
        and s.undo_tool
    ]
    return sorted(found, key=lambda s: s.n, reverse=True)


def cancel_refusal(*, task_id: UUID) -> str | None:
    """Why :func:`task_cancel` would refuse to stop the task now, or ``None``."""
    refused: str | None = call("journal_task_cancel_refusal", task=task_id)
    return refused


def compensate_refusal(*, task_id: UUID) -> str | None:
    """Why :func:`saga_compensate` would refuse now, or ``None``."""
    refused: str | None = call("journal_saga_compensate_refusal", task=task_id)
    return refused


def correction_refusal(*, step_id: int) -> str | None:
    """Why :func:`step_correct` would refuse to correct the step now, or ``None``."""
    refused: str | None = call("journal_step_correct_refusal", step=step_id)
    return refused


def correction_of(step: Step) -> int | None:
    """The step that ``step`` corrects (its number), if it is a person's correction."""
    decision = step.decision if isinstance(step.decision, dict) else {}
    of = decision.get("of")
    return of if decision.get("harness") == "correction" and isinstance(of, int) else None


# --- Sagas: approve, reject, compensate now -------------------------------------------------


def approval_approve(
    *, task_id: UUID, approval_id: int, digest: str, actor: str, reason: str = ""
) -> bool:
    """A person approves the held step they were shown (``digest`` of its tool and
    arguments): the saga goes on with exactly that step, and ``True`` is returned. Refused
    (:class:`TransitionRefused`, nothing written) when ``digest`` is not what waits — the
    person saw something else. When the request has expired, the approval is not given:
    it is marked expired, the task goes back to decide again and ask anew, and ``False`` is
    returned. ``reason`` is optional (approving is the expected answer), and recorded with
    who, when, the digest and the exact call approved."""
    return bool(
        call(
            "journal_approval_approve",
            task=task_id,
            approval=approval_id,
            digest=digest,
            actor=actor,
            reason=reason,
        )
    )


def approval_reject(*, task_id: UUID, approval_id: int, actor: str, reason: str) -> None:
    """A person rejects the held step: it never runs, and the saga compensates what it did."""
    call("journal_approval_reject", task=task_id, approval=approval_id, actor=actor, reason=reason)


def saga_compensate(*, task_id: UUID, actor: str, reason: str) -> None:
    """A person has a task compensate now: from now on its done effects are undone, newest
    first, each by the undo it declared (keyed from it, reconciled like any step), and no
    step goes forward. For a saga still under way, held, or handed over; for any other task
    only while it needs a person and holds an effect that can be undone (a late effect a
    person corrected); never for one that ended (:func:`compensate_refusal`)."""
    call("journal_saga_compensate", task=task_id, actor=actor, reason=reason)


# --- Steps: reconcile now, settle by hand, correct ------------------------------------------


def steps_reconcile_now(*, step_ids: list[int], actor: str, reason: str = "") -> list[UUID]:
    """Have open steps looked up at once (by key; retried with the same key only while it is
    trusted — the runner decides, from each step's record). Their tasks wake: a waiting task
    becomes runnable, and a task handed to a person for such a step goes on. Returns the
    tasks to ring for. Settled steps, and steps of tasks that are over, are left alone."""
    woken: list[UUID] = call_all(
        "journal_steps_reconcile_now", steps=list(step_ids), actor=actor, reason=reason
    )
    return woken


def step_resolve(
    *, step_id: int, actor: str, done: bool, evidence: str = "", reason: str = ""
) -> int:
    """Record a person's decision about a step nobody can settle automatically: its task
    needs a person and the step is still open. ``done`` with the evidence the person found at
    the provider (a charge id, a message id), or not done with the reason. A worker applies
    it (:func:`decision_apply`): the step is settled as any report, as the person's word — an
    undo settled so does not free its object. Returns the decision's id."""
    decision: int = call(
        "journal_step_resolve",
        step=step_id,
        actor=actor,
        done=done,
        evidence=evidence,
        reason=reason,
    )
    return decision


def step_correct(
    *,
    step_id: int,
    actor: str,
    evidence: Mapping[str, Any],
    reason: str,
    tools: Mapping[str, Tool],
) -> int:
    """Record a person's correction of a step that was settled ``not_done`` but happened
    after all, as a later report showed (a charge that landed after its step was settled by
    hand and the task cancelled: a conflict). A worker applies it (:func:`decision_apply`):
    a step of its own, the same tool and arguments, settled ``done`` with the evidence they
    give (every name the tool's evidence declares), its decision naming the step it corrects;
    the guards count it from then on. Refused, with nothing written, where
    :func:`correction_refusal` says so, when the evidence is short, and when the guards would
    refuse it (another effect on its object stands). Returns the decision's id."""
    step = Step.objects.only("tool").get(pk=step_id)
    tool = tools.get(step.tool)
    if tool is None:
        raise TransitionRefused(f"step {step_id}'s tool {step.tool} is not available")
    given = dict(evidence)
    missing = evidence_missing(given, tool.evidence)
    if missing:
        raise TransitionRefused(
            f"give the evidence of the effect you found at the provider: "
            f"{', '.join(missing)} (a done {step.tool} carries {', '.join(tool.evidence)})"
        )
    decision: int = call(
        "journal_step_correct",
        step=step_id,
        actor=actor,
        evidence=given,
        reason=reason,
        label=evidence_label(given),
    )
    return decision


def decision_apply(*, decision_id: int) -> str:
    """Apply a person's decision about a step (a worker's move), asking again whether it
    still may: what it did, in a sentence ("settled done by hand", "corrected as step 3",
    "not applied: ..."). A decision applied already is left alone."""
    said: str = call("journal_decision_apply", decision=decision_id)
    return said
