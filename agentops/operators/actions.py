"""What a person may do on a task's page, and whether the journal would let them now.

An action is offered only where this user has its permission and the journal would take it;
where the journal would refuse it (cancelling a task whose step may still have acted), it is
shown disabled with the journal's own sentence (``journal.operator``'s ``*_refusal``), so
nobody presses a button to be told no. The server checks again when it is pressed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django import forms

from agentops.effects import ActionRefused, registry
from agentops.http import HtmxHttpRequest
from agentops.operators import selectors
from agentops.operators.forms import ApproveForm, CorrectForm, ReasonForm, RejectForm, ResolveForm
from agentops.operators.services import (
    step_correct,
    step_resolve,
    steps_reconcile_now,
    task_approve,
    task_cancel,
    task_compensate,
    task_reject,
    task_resume,
)
from journal.models import Attention, Step, Task, TaskStatus
from journal.operator import cancel_refusal, compensate_refusal, correction_refusal
from journal.outcomes import LIVE_STATES
from journal.status import FINAL, TransitionRefused


@dataclass(frozen=True)
class Action:
    permission: str
    label: str
    question: str
    form: Callable[..., forms.Form]
    step: bool = False
    key: str = ""
    """Its keyboard shortcut on the task's page, if any."""


@dataclass(frozen=True)
class Offer:
    """An action as the page shows it: offered, or shown disabled saying why not."""

    name: str
    label: str
    why_not: str = ""
    key: str = ""

    @property
    def enabled(self) -> bool:
        return not self.why_not


def _reason(required: bool) -> Callable[..., forms.Form]:
    return lambda *a, **k: ReasonForm(*a, reason_required=required, **k)


ACTIONS: dict[str, Action] = {
    "reconcile": Action(
        "journal.reconcile_step",
        "Reconcile now",
        "Look this step up at its provider now, by its key? It is sent again, with the same "
        "key, only while the provider still remembers the key.",
        _reason(False),
        step=True,
        key=".",
    ),
    "resolve": Action(
        "journal.resolve_step",
        "Resolve manually",
        "Settle this step by hand, from what you found at the provider?",
        ResolveForm,
        step=True,
    ),
    "correct": Action(
        "journal.resolve_step",
        "Correct: it happened",
        "This step was settled not done, but the provider shows it happened. Record it as "
        "done, with the evidence you found? The step itself stays as it was settled; the "
        "correction is a step of its own, which compensating the task then undoes (a refund, a "
        "cancellation), keyed from it.",
        CorrectForm,
        step=True,
    ),
    "approve": Action(
        "journal.decide_approval",
        "Approve",
        "Approve exactly this call? The saga goes on with it, and nothing else.",
        ApproveForm,
        key="a",
    ),
    "reject": Action(
        "journal.decide_approval",
        "Reject",
        "Reject this call? It never runs, and the saga undoes what it did.",
        RejectForm,
        key="r",
    ),
    "compensate": Action(
        "journal.compensate_saga",
        "Compensate",
        "Undo everything this task did that can be undone, newest first? Nothing goes forward.",
        _reason(True),
    ),
    "resume": Action(
        "journal.resume_task",
        "Resume",
        "Let this task go on from where it is?",
        _reason(True),
        key="u",
    ),
    "cancel": Action(
        "journal.resume_task",
        "Cancel",
        "Stop this task for good?",
        _reason(True),
    ),
}


def actions() -> dict[str, Action]:
    """Ours, and those the installed apps add (always with a reason)."""
    added = {
        name: Action(a.permission, a.label, a.question, _reason(True))
        for name, a in registry.actions.items()
        if name not in ACTIONS
    }
    return {**ACTIONS, **added}


def _offer(name: str, why_not: str = "") -> Offer:
    spec = actions()[name]
    return Offer(name, spec.label, why_not, spec.key)


def step_offers(
    request: HtmxHttpRequest, page: selectors.TaskPage, row: selectors.StepRow
) -> list[Offer]:
    """What this user may do to this step now, where it is safe."""
    user, task, step = request.user, page.task, row.step
    found = []
    open_step = step.state in LIVE_STATES
    if (
        open_step
        and task.status not in (*FINAL, TaskStatus.AWAITING_APPROVAL)
        and not (step.state == "pending" and page.running_now)
        and user.has_perm("journal.reconcile_step")
    ):
        found.append(_offer("reconcile"))
    if (
        open_step
        and task.status == TaskStatus.NEEDS_HUMAN
        and user.has_perm("journal.resolve_step")
    ):
        found.append(_offer("resolve"))
    if (
        user.has_perm("journal.resolve_step")
        and (row.reported is not None or task.attention_code == Attention.CONFLICT)
        and correction_refusal(step_id=step.pk) is None
    ):
        found.append(_offer("correct"))
    return found


def task_offers(request: HtmxHttpRequest, page: selectors.TaskPage) -> list[Offer]:
    """What this user may do to the task now; what the journal would refuse, disabled with
    its reason."""
    user, task = request.user, page.task
    found = []
    if page.held is not None and user.has_perm("journal.decide_approval"):
        found += [_offer("approve"), _offer("reject")]
    if user.has_perm("journal.compensate_saga") and compensate_refusal(task_id=task.pk) is None:
        found.append(_offer("compensate"))
    if task.status == TaskStatus.NEEDS_HUMAN and user.has_perm("journal.resume_task"):
        found.append(_offer("resume"))
        found.append(_offer("cancel", cancel_refusal(task_id=task.pk) or ""))
    # What the installed apps add (a payment's retry): each its own permission and test.
    for name, added in registry.actions.items():
        if user.has_perm(added.permission) and added.available(task):
            found.append(_offer(name))
    return found


def perform(
    action: str,
    *,
    actor: str,
    page: selectors.TaskPage,
    step: Step | None,
    data: dict[str, Any],
) -> Task | None:
    """Do the action; a task it started is returned, for the operator to be taken to.
    Raises :class:`TransitionRefused` with the journal's sentence when it is refused."""
    task_id = page.task.pk
    reason = str(data.get("reason") or "")
    if action == "reconcile" and step is not None:
        steps_reconcile_now(step_ids=[step.pk], actor=actor, reason=reason)
    elif action == "resolve" and step is not None:
        step_resolve(
            step_id=step.pk,
            actor=actor,
            done=data["outcome"] == "done",
            evidence=str(data.get("evidence") or ""),
            reason=reason,
        )
    elif action == "correct" and step is not None:
        step_correct(step_id=step.pk, actor=actor, evidence=data["evidence"], reason=reason)
    elif action == "approve":
        if not task_approve(
            task_id=task_id,
            approval_id=data["approval"],
            digest=data["digest"],
            actor=actor,
            reason=reason,
        ):
            raise TransitionRefused(
                "the request for approval had expired: the saga decides again and asks anew"
            )
    elif action == "reject":
        task_reject(task_id=task_id, approval_id=data["approval"], actor=actor, reason=reason)
    elif action == "compensate":
        task_compensate(task_id=task_id, actor=actor, reason=reason)
    elif action == "resume":
        task_resume(task_id=task_id, actor=actor, reason=reason)
    elif action == "cancel":
        task_cancel(task_id=task_id, actor=actor, reason=reason)
    elif action in registry.actions:
        try:
            started: Task | None = registry.actions[action].perform(
                task=page.task, actor=actor, reason=reason
            )
        except ActionRefused as exc:
            raise TransitionRefused(str(exc)) from exc
        return started
    return None
