"""What a person may do to a task the harness handed over (docs/design.md §7, §8).

Each action is recorded with who did it and why, in the same transaction as its effect on
the task, and refused — with a sentence, nothing written — where it is not safe.
"""

from __future__ import annotations

from uuid import UUID

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Now

from journal.entries import entries_add, entry
from journal.models import (
    Approval,
    ApprovalState,
    EntryKind,
    Step,
    StepKind,
    Task,
    TaskStatus,
)
from journal.outcomes import LIVE_STATES, Outcome, StepState
from journal.sagas import approval_expire, is_expired, saga_unwind
from journal.settle import step_settle
from journal.status import TransitionRefused, task_transition


def _flagged(task_id: UUID, action: str) -> Task:
    task = Task.objects.select_for_update().get(pk=task_id)
    if task.status != TaskStatus.NEEDS_HUMAN:
        raise TransitionRefused(
            f"task {task_id} is {TaskStatus(task.status).label}; only a task that needs a "
            f"human can be {action}"
        )
    return task


def _why(reason: str) -> str:
    reason = reason.strip()
    if not reason:
        raise TransitionRefused("say why: the journal records every operator action's reason")
    return reason[:2000]


def task_resume(*, task_id: UUID, actor: str, reason: str) -> TaskStatus:
    """Let a task that needs a human go on, and say what it is now.

    A task that had already finished (flagged later by a conflicting report) goes back to
    finished: its decision that it was over stands. Any other goes back to runnable, its
    run-failure count cleared, and an unknown step nobody was looking up any more gets one
    more lookup at once (which may hand it back, if that still settles nothing).
    """
    why = _why(reason)
    with transaction.atomic():
        task = _flagged(task_id, "resumed")
        finished = Step.objects.filter(task=task, kind=StepKind.FINISH).exists()
        over = TaskStatus.COMPENSATED if task.unwinding else TaskStatus.FINISHED
        to = over if finished else TaskStatus.RUNNABLE
        Task.objects.filter(pk=task_id).update(failed_runs=0)
        Step.objects.filter(task=task, state=StepState.UNKNOWN, next_check_at__isnull=True).update(
            next_check_at=Now()
        )
        entries_add(
            entry(
                kind=EntryKind.OPERATOR_ACTION,
                task_id=task_id,
                actor=actor,
                action="resume",
                reason=why,
                was=task.attention_code,
            )
        )
        task_transition(
            task_id=task_id,
            to=to,
            frm=[TaskStatus.NEEDS_HUMAN],
            actor=actor,
            reason=f"resumed by {actor}: {why}",
        )
    return to


def task_cancel(*, task_id: UUID, actor: str, reason: str) -> None:
    """Stop a task that needs a human. Refused while one of its steps may still have acted:
    that step must be settled (reconciled, or resolved by hand) first, or nobody would ever
    find out what happened."""
    why = _why(reason)
    with transaction.atomic():
        task = _flagged(task_id, "cancelled")
        open_step = Step.objects.filter(task=task, state__in=LIVE_STATES).order_by("n").first()
        if open_step is not None:
            raise TransitionRefused(
                f"step {open_step.key} ({open_step.tool}) is {open_step.state}: it may have "
                "happened; reconcile it or resolve it by hand before cancelling the task"
            )
        standing = _undoable(task)
        if task.plan and standing is not None:
            raise TransitionRefused(
                f"step {standing.key} ({standing.tool}) is done and can be undone: compensate "
                "the saga rather than cancel it, or nothing would ever undo it"
            )
        entries_add(
            entry(
                kind=EntryKind.OPERATOR_ACTION,
                task_id=task_id,
                actor=actor,
                action="cancel",
                reason=why,
                was=task.attention_code,
            )
        )
        task_transition(
            task_id=task_id,
            to=TaskStatus.CANCELLED,
            frm=[TaskStatus.NEEDS_HUMAN],
            actor=actor,
            reason=f"cancelled by {actor}: {why}",
        )


def _undoable(task: Task) -> Step | None:
    """A done effect of the task that declared an undo and was not undone."""
    return (
        Step.objects.filter(
            task=task, state=StepState.DONE, offset_by__isnull=True, offsets__isnull=True
        )
        .exclude(undo_tool="")
        .order_by("-n")
        .first()
    )


# --- Sagas: approve, reject, compensate now -------------------------------------------------


def _awaiting(task_id: UUID, approval_id: int) -> tuple[Task, Approval]:
    task = Task.objects.select_for_update().get(pk=task_id)
    approval = (
        Approval.objects.select_for_update()
        .annotate(db_now=Now())
        .filter(pk=approval_id, task=task)
        .first()
    )
    if approval is None:
        raise TransitionRefused(f"task {task_id} has no approval {approval_id}")
    if task.status != TaskStatus.AWAITING_APPROVAL or approval.state != ApprovalState.PENDING:
        raise TransitionRefused(
            f"approval {approval_id} is {approval.state} and the task is "
            f"{TaskStatus(task.status).label}: there is nothing to decide"
        )
    return task, approval


def approval_approve(*, task_id: UUID, approval_id: int, digest: str, actor: str) -> bool:
    """A person approves the held step they were shown (``digest`` of its tool and
    arguments): the saga goes on with exactly that step, and ``True`` is returned. Refused
    (:class:`TransitionRefused`, nothing written) when ``digest`` is not what waits — the
    person saw something else. When the request has expired, the approval is not given:
    it is marked expired, the task goes back to decide again and ask anew, and ``False`` is
    returned."""
    if not actor:
        raise TransitionRefused("say who approves: the journal records it")
    with transaction.atomic():
        task, approval = _awaiting(task_id, approval_id)
        if digest != approval.digest:
            raise TransitionRefused(
                f"approval {approval_id} is for {approval.tool} with arguments digest "
                f"{approval.digest[:12]}…, not {digest[:12]}…: approve what is shown now"
            )
        if is_expired(approval):
            expired = True
        else:
            expired = False
            Approval.objects.filter(pk=approval.pk).update(
                state=ApprovalState.APPROVED, decided_by=actor, decided_at=Now()
            )
            entries_add(
                entry(
                    kind=EntryKind.APPROVAL_DECIDED,
                    task_id=task_id,
                    actor=actor,
                    approval=approval.pk,
                    decision="approved",
                    tool=approval.tool,
                    digest=approval.digest,
                )
            )
            task_transition(
                task_id=task_id,
                to=TaskStatus.RUNNABLE,
                frm=[TaskStatus.AWAITING_APPROVAL],
                actor=actor,
                reason=f"{approval.tool} approved by {actor}",
            )
    if expired:
        with transaction.atomic():
            approval_expire(approval=approval, actor=actor)
            task_transition(
                task_id=task_id,
                to=TaskStatus.RUNNABLE,
                frm=[TaskStatus.AWAITING_APPROVAL],
                actor=actor,
                reason="the request for approval expired; the saga decides again and asks anew",
            )
    return not expired


def approval_reject(*, task_id: UUID, approval_id: int, actor: str, reason: str) -> None:
    """A person rejects the held step: it never runs, and the saga compensates what it did."""
    why = _why(reason)
    with transaction.atomic():
        task, approval = _awaiting(task_id, approval_id)
        Approval.objects.filter(pk=approval.pk).update(
            state=ApprovalState.REJECTED,
            decided_by=actor,
            decided_at=Now(),
            decision_reason=why,
        )
        entries_add(
            entry(
                kind=EntryKind.APPROVAL_DECIDED,
                task_id=task_id,
                actor=actor,
                approval=approval.pk,
                decision="rejected",
                reason=why,
            )
        )
        saga_unwind(
            task_id=task_id, reason=f"{approval.tool} rejected by {actor}: {why}", actor=actor
        )
        task_transition(
            task_id=task_id,
            to=TaskStatus.RUNNABLE,
            frm=[TaskStatus.AWAITING_APPROVAL],
            actor=actor,
            reason=f"rejected by {actor}: {why}",
        )


def saga_compensate(*, task_id: UUID, actor: str, reason: str) -> None:
    """A person has a saga compensate now: from now on its done effects are undone, newest
    first, and no step goes forward. For a saga still under way, held, or handed over; not
    for one that is over."""
    why = _why(reason)
    with transaction.atomic():
        task = Task.objects.select_for_update().get(pk=task_id)
        if not task.plan:
            raise TransitionRefused(f"task {task_id} is not a saga: it has nothing to compensate")
        if task.status in (TaskStatus.FINISHED, TaskStatus.CANCELLED, TaskStatus.COMPENSATED):
            raise TransitionRefused(
                f"task {task_id} is {TaskStatus(task.status).label}: it is over"
            )
        pending = Approval.objects.filter(task=task, state=ApprovalState.PENDING)
        for held in pending:
            Approval.objects.filter(pk=held.pk).update(
                state=ApprovalState.REJECTED,
                decided_by=actor,
                decided_at=Now(),
                decision_reason=f"compensated instead: {why}",
            )
        entries_add(
            entry(
                kind=EntryKind.OPERATOR_ACTION,
                task_id=task_id,
                actor=actor,
                action="compensate",
                reason=why,
                was=task.status,
            )
        )
        saga_unwind(task_id=task_id, reason=f"compensated by {actor}: {why}", actor=actor)
        if task.status in (TaskStatus.NEEDS_HUMAN, TaskStatus.AWAITING_APPROVAL):
            Task.objects.filter(pk=task_id).update(failed_runs=0)
            task_transition(
                task_id=task_id,
                to=TaskStatus.RUNNABLE,
                frm=[TaskStatus.NEEDS_HUMAN, TaskStatus.AWAITING_APPROVAL],
                actor=actor,
                reason=f"compensating, by {actor}: {why}",
            )


# --- Steps: reconcile now, settle by hand ---------------------------------------------------


def steps_reconcile_now(*, step_ids: list[int], actor: str, reason: str = "") -> list[UUID]:
    """Have open steps looked up at once (by key; retried with the same key only while it is
    trusted — the runner decides, from each step's record). Their tasks wake: a waiting task
    becomes runnable, and a task handed to a person for such a step goes on. Returns the
    tasks to ring for. Settled steps, and steps of tasks that are over, are left alone."""
    woken: list[UUID] = []
    with transaction.atomic():
        steps = list(
            Step.objects.select_related("task")
            .select_for_update(of=("self",))
            .filter(pk__in=step_ids, state__in=LIVE_STATES)
            .exclude(
                task__status__in=[
                    TaskStatus.FINISHED,
                    TaskStatus.CANCELLED,
                    TaskStatus.COMPENSATED,
                    TaskStatus.AWAITING_APPROVAL,
                ]
            )
            .order_by("task_id", "n")
        )
        for step in steps:
            Step.objects.filter(pk=step.pk).update(next_check_at=Now())
            Task.objects.filter(pk=step.task_id).update(version=F("version") + 1)
            entries_add(
                entry(
                    kind=EntryKind.OPERATOR_ACTION,
                    task_id=step.task_id,
                    step_id=step.pk,
                    actor=actor,
                    action="reconcile",
                    reason=reason or "reconcile now",
                )
            )
            if step.task_id in woken:
                continue
            woken.append(step.task_id)
            status = (
                Task.objects.select_for_update()
                .values_list("status", flat=True)
                .get(pk=step.task_id)
            )
            if status in (TaskStatus.WAITING, TaskStatus.NEEDS_HUMAN):
                if status == TaskStatus.NEEDS_HUMAN:
                    Task.objects.filter(pk=step.task_id).update(failed_runs=0)
                task_transition(
                    task_id=step.task_id,
                    to=TaskStatus.RUNNABLE,
                    frm=[TaskStatus.WAITING, TaskStatus.NEEDS_HUMAN],
                    actor=actor,
                    step_id=step.pk,
                    reason=f"reconcile {step.key} now, by {actor}",
                )
    return woken


def step_resolve(
    *, step_id: int, actor: str, done: bool, evidence: str = "", reason: str = ""
) -> None:
    """Settle by hand a step nobody can settle automatically: its task needs a person and the
    step is still open. ``done`` with the evidence the person found at the provider (a charge
    id, a message id), or not done with the reason. Recorded like any report (monotone: a
    later contradicting report is a conflict), and as the person's action. The task stays
    with the person, who resumes it when ready."""
    why = _why(reason)
    if done and not evidence.strip():
        raise TransitionRefused("give the evidence you found (a charge or message id)")
    with transaction.atomic():
        step = Step.objects.select_related("task").get(pk=step_id)
        if step.state not in LIVE_STATES or step.task.status != TaskStatus.NEEDS_HUMAN:
            raise TransitionRefused(
                f"step {step.key} is {step.state} and its task is "
                f"{TaskStatus(step.task.status).label}: only an open step of a task that needs "
                "a person is settled by hand"
            )
        outcome = (
            Outcome.done({"reference": evidence.strip()[:200], "resolved_by": actor}, why)
            if done
            else Outcome.not_done(f"settled by hand by {actor}: {why}", resolved_by=actor)
        )
        entries_add(
            entry(
                kind=EntryKind.OPERATOR_ACTION,
                task_id=step.task_id,
                step_id=step.pk,
                actor=actor,
                action="resolve",
                state=outcome.state,
                reason=why,
                evidence=evidence.strip()[:200],
            )
        )
        step_settle(step_id=step.pk, outcome=outcome, via="operator", actor=actor)
