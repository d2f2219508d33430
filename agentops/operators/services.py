"""What a person may do to a task, from the pages (agentops.operators.actions), the HTTP API
and the management commands: each is one journal function (journal/operator.py, checked and
recorded in the database with who and why), and the task is rung for once it can go on.

The web server's role makes these moves (agentops/dbroles.py, "people"). A decision about a
step's outcome (settled by hand, corrected) is recorded here and applied by a worker
(agentops/decisions.py): the web server's role settles no step.
"""

from __future__ import annotations

from functools import partial
from typing import Any
from uuid import UUID

from django.db import transaction

from agentops.decisions import decision_rung
from agentops.doorbell import task_ring
from agentops.effects import kinds
from agentops.kinds import followup_start, tools_for
from journal import operator
from journal.models import Task, TaskStatus
from journal.selectors import task_facts


def task_resume(*, task_id: UUID, actor: str, reason: str) -> TaskStatus:
    """A person lets a task that needs a human go on (journal.operator); if it can advance,
    it is rung for. Returns its status now."""
    with transaction.atomic():
        status = operator.task_resume(task_id=task_id, actor=actor, reason=reason)
        if status == TaskStatus.RUNNABLE:
            transaction.on_commit(lambda: task_ring(task_id=task_id))
    return status


def task_cancel(*, task_id: UUID, actor: str, reason: str) -> Task | None:
    """A person stops a task that needs a human (journal.operator). No worker runs on it
    again: when its kind says the customer is to be told (``Kind.on_cancel``), the task that
    tells them is started in the same transaction as the cancel — with it, or not at all —
    and so once (a cancelled task is not cancelled again). Returns that task, if any."""
    with transaction.atomic():
        operator.task_cancel(task_id=task_id, actor=actor, reason=reason)
        task = Task.objects.get(pk=task_id)
        kind = kinds().get(task.kind)
        hook = kind.on_cancel if kind is not None else None
        follow = hook(dict(task.refs or {}), task_facts(task=task)) if hook else None
        if follow is None:
            return None
        return followup_start(follow, actor=actor)


def steps_reconcile_now(*, step_ids: list[int], actor: str, reason: str = "") -> None:
    """A person has these open steps looked up now (journal.operator); their tasks are rung."""
    with transaction.atomic():
        woken = operator.steps_reconcile_now(step_ids=step_ids, actor=actor, reason=reason)
        for task_id in woken:
            transaction.on_commit(partial(task_ring, task_id=task_id))


def step_resolve(
    *, step_id: int, actor: str, done: bool, evidence: str = "", reason: str = ""
) -> int:
    """A person settles an open step by hand (journal.operator.step_resolve): the decision is
    recorded, and a worker rung to apply it once that is committed (agentops.decisions).
    Returns the decision's id."""
    with transaction.atomic():
        return decision_rung(
            operator.step_resolve(
                step_id=step_id, actor=actor, done=done, evidence=evidence, reason=reason
            )
        )


def step_correct(*, step_id: int, actor: str, evidence: dict[str, Any], reason: str) -> int:
    """A person corrects a step settled not done that happened after all
    (journal.operator.step_correct), with the tools of its task's kind: the decision is
    recorded, and a worker rung to apply it. Returns the decision's id."""
    task = Task.objects.get(steps__pk=step_id)
    with transaction.atomic():
        return decision_rung(
            operator.step_correct(
                step_id=step_id,
                actor=actor,
                evidence=evidence,
                reason=reason,
                tools=tools_for(task),
            )
        )


def task_approve(
    *, task_id: UUID, approval_id: int, digest: str, actor: str, reason: str = ""
) -> bool:
    """A person approves a held saga step (journal.operator.approval_approve), with an
    optional reason; the task is rung for either way (approved: it goes on; expired: it asks
    again)."""
    with transaction.atomic():
        approved = operator.approval_approve(
            task_id=task_id, approval_id=approval_id, digest=digest, actor=actor, reason=reason
        )
        transaction.on_commit(lambda: task_ring(task_id=task_id))
    return approved


def task_reject(*, task_id: UUID, approval_id: int, actor: str, reason: str) -> None:
    """A person rejects a held saga step: the saga compensates what it did."""
    with transaction.atomic():
        operator.approval_reject(
            task_id=task_id, approval_id=approval_id, actor=actor, reason=reason
        )
        transaction.on_commit(lambda: task_ring(task_id=task_id))


def task_compensate(*, task_id: UUID, actor: str, reason: str) -> None:
    """A person has a saga compensate now."""
    with transaction.atomic():
        operator.saga_compensate(task_id=task_id, actor=actor, reason=reason)
        transaction.on_commit(lambda: task_ring(task_id=task_id))
