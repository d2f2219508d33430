"""What a person may do to a task the harness handed over (docs/design.md §7, §8).

Each action is recorded with who did it and why, in the same transaction as its effect on
the task, and refused — with a sentence, nothing written — where it is not safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Now

from journal.entries import entries_add, entry
from journal.leases import lease_acquire
from journal.models import (
    Approval,
    ApprovalState,
    Attention,
    EntryKind,
    Step,
    StepKind,
    Task,
    TaskStatus,
)
from journal.outcomes import LIVE_STATES, Outcome, StepState, evidence_missing
from journal.protocols import Call, Tool
from journal.record import step_record
from journal.sagas import approval_expire, is_expired, saga_unwind
from journal.settle import step_settle
from journal.status import FINAL, TransitionRefused, task_flag, task_transition
from journal.summary import evidence_label


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
        refused = cancel_refusal(task=task, steps=Step.objects.filter(task=task).order_by("n"))
        if refused is not None:
            raise TransitionRefused(refused)
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


# --- What is refused, and why: one rule for the services and the pages that offer them -------


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


def cancel_refusal(*, task: Task, steps: Iterable[Step]) -> str | None:
    """Why :func:`task_cancel` would refuse to stop ``task`` (its ``steps`` as read), or
    ``None``: only a task that needs a person is cancelled, never while one of its steps may
    still have acted (nobody would ever find out what happened), and a saga is compensated
    rather than cancelled while an effect that can be undone stands (nothing would undo it)."""
    if task.status != TaskStatus.NEEDS_HUMAN:
        return (
            f"task {task.pk} is {TaskStatus(task.status).label}; only a task that needs a "
            "human can be cancelled"
        )
    steps = list(steps)
    open_step = next((s for s in steps if s.state in LIVE_STATES), None)
    if open_step is not None:
        return (
            f"step {open_step.key} ({open_step.tool}) is {open_step.state}: it may have "
            "happened; reconcile it or resolve it by hand before cancelling the task"
        )
    standing = undoable(steps)
    if task.plan and standing:
        return (
            f"step {standing[0].key} ({standing[0].tool}) is done and can be undone: "
            "compensate the saga rather than cancel it, or nothing would ever undo it"
        )
    return None


def compensate_refusal(*, task: Task, steps: Iterable[Step]) -> str | None:
    """Why :func:`saga_compensate` would refuse, or ``None``. A saga compensates while it is
    under way, held or handed over, not once it is over. A task that is not a saga is
    compensated only while it needs a person and holds an effect that can be undone: a late
    effect a person corrected (:func:`step_correct`) is undone like any compensation."""
    if task.status in FINAL:
        return f"task {task.pk} is {TaskStatus(task.status).label}: it is over"
    if task.plan:
        return None
    if task.status != TaskStatus.NEEDS_HUMAN:
        return f"task {task.pk} is not a saga: its effects are undone only while it needs a person"
    if not undoable(steps):
        return f"task {task.pk} holds no done effect that can be undone"
    return None


def correction_refusal(*, task: Task, step: Step, steps: Iterable[Step]) -> str | None:
    """Why :func:`step_correct` would refuse to correct ``step``, or ``None``: only a step
    that was settled ``not_done`` after it was sent (a refused step never left), of a task
    that needs a person, and once."""
    if task.status != TaskStatus.NEEDS_HUMAN:
        return (
            f"task {task.pk} is {TaskStatus(task.status).label}: only a task that needs a "
            "person is corrected"
        )
    if step.kind != StepKind.CALL or step.state != StepState.NOT_DONE:
        return f"step {step.key} is {step.state}: only a step settled not done is corrected"
    if step.refusal:
        return (
            f"step {step.key} was refused ({step.refusal}) and never sent: it cannot have happened"
        )
    if task.unwinding:
        # A correction is recorded like any step, and an unwinding saga records only undos.
        return (
            f"task {task.pk} is unwinding and records nothing but undos: undo the effect of "
            f"step {step.key} at the provider, then resume"
        )
    corrected = next((s for s in steps if correction_of(s) == step.n), None)
    if corrected is not None:
        return f"step {step.key} was corrected already, as step {corrected.n}"
    return None


def correction_of(step: Step) -> int | None:
    """The step that ``step`` corrects (its number), if it is a person's correction."""
    decision = step.decision if isinstance(step.decision, dict) else {}
    of = decision.get("of")
    return of if decision.get("harness") == "correction" and isinstance(of, int) else None


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
    if not actor:
        raise TransitionRefused("say who approves: the journal records it")
    why = reason.strip()[:2000]
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
                state=ApprovalState.APPROVED,
                decided_by=actor,
                decided_at=Now(),
                decision_reason=why,
            )
            # Who, when (the entry's time), why, and exactly what: the call and its digest.
            decided: dict[str, Any] = {"tool": approval.tool, "args": approval.args}
            if why:
                decided["reason"] = why
            entries_add(
                entry(
                    kind=EntryKind.APPROVAL_DECIDED,
                    task_id=task_id,
                    actor=actor,
                    approval=approval.pk,
                    decision="approved",
                    digest=approval.digest,
                    **decided,
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
                tool=approval.tool,
                args=approval.args,
                digest=approval.digest,
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
    """A person has a task compensate now: from now on its done effects are undone, newest
    first, each by the undo it declared (keyed from it, reconciled like any step), and no
    step goes forward. For a saga still under way, held, or handed over; for any other task
    only while it needs a person and holds an effect that can be undone (a late effect a
    person corrected); never for one that is over (:func:`compensate_refusal`)."""
    why = _why(reason)
    with transaction.atomic():
        task = Task.objects.select_for_update().get(pk=task_id)
        refused = compensate_refusal(task=task, steps=Step.objects.filter(task=task))
        if refused is not None:
            raise TransitionRefused(refused)
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


def step_correct(
    *,
    step_id: int,
    actor: str,
    evidence: Mapping[str, Any],
    reason: str,
    tools: Mapping[str, Tool],
) -> Step:
    """A person corrects the journal about a step that was settled ``not_done`` but happened
    after all, as a later report showed (a charge that landed after its step was settled by
    hand and the task cancelled: a conflict). A settled step never changes (docs/design.md
    §4), so the correction is a step of its own: the same tool and arguments, recorded by the
    person and settled ``done`` with the evidence they give (every name the tool's evidence
    declares), its decision naming the step it corrects. From then on it stands like any
    effect: the guards count it, and compensating the task (:func:`saga_compensate`) undoes
    it by its declared undo, keyed from it. Refused, with nothing written, where
    :func:`correction_refusal` says so, when the evidence is short, and when the guards
    refuse it (another effect on its object stands: that one is to be settled first). The
    task stays with the person, its attention saying what was corrected. Returns the
    correction."""
    why = _why(reason)
    if not actor:
        raise TransitionRefused("say who corrects: the journal records it")
    with transaction.atomic():
        step = Step.objects.get(pk=step_id)
        task = Task.objects.select_for_update().get(pk=step.task_id)
        refused = correction_refusal(task=task, step=step, steps=Step.objects.filter(task=task))
        if refused is not None:
            raise TransitionRefused(refused)
        tool = tools.get(step.tool)
        if tool is None:
            raise TransitionRefused(f"step {step.key}'s tool {step.tool} is not available")
        missing = evidence_missing(evidence, tool.evidence)
        if missing:
            raise TransitionRefused(
                f"give the evidence of the effect you found at the provider: "
                f"{', '.join(missing)} (a done {step.tool} carries {', '.join(tool.evidence)})"
            )
        code = task.attention_code
        # A step is recorded only for a runnable task, under its lease (journal_step_born):
        # the person takes both for the length of this transaction, as a runner would; the
        # task's row lock keeps any runner out meanwhile.
        task_transition(
            task_id=task.pk,
            to=TaskStatus.RUNNABLE,
            frm=[TaskStatus.NEEDS_HUMAN],
            actor=actor,
            step_id=step.pk,
            reason=f"correcting step {step.n}, by {actor}: {why}",
        )
        lease = lease_acquire(task_id=task.pk, owner=f"person:{actor}"[:200])
        if lease is None:
            raise TransitionRefused("a runner holds this task right now: try again in a moment")
        call = Call(step.tool, dict(step.args), raw={"harness": "correction", "of": step.n})
        made = step_record(lease=lease, decision=call, tools={step.tool: tool})
        if made.state != StepState.PENDING:
            raise TransitionRefused(f"the correction cannot be recorded: {made.detail}")
        given = dict(evidence)
        step_settle(
            step_id=made.pk,
            outcome=Outcome.done(
                given, f"step {step.n} happened after all, corrected by {actor}: {why}"
            ),
            via="operator",
            lease=lease,
            actor=actor,
        )
        entries_add(
            entry(
                kind=EntryKind.OPERATOR_ACTION,
                task_id=task.pk,
                step_id=step.pk,
                actor=actor,
                action="correct",
                reason=why,
                evidence=given,
                correction=made.n,
                was=code,
            )
        )
        task_flag(
            lease=lease,
            release=True,
            task_id=task.pk,
            code=Attention(code) if code in Attention.values else Attention.CONFLICT,
            step_id=made.pk,
            actor=actor,
            reason=(
                f"step {step.n} ({step.tool}) happened after all ({evidence_label(given)}): "
                f"{actor} corrected it as step {made.n}. Compensate to undo it, or resume the "
                "task to go on with it"
            ),
        )
    return Step.objects.get(pk=made.pk)
