"""Operators coordinating on a task (issue 38): who holds it, and the notes left on it.

A person **claims** a task to say they are working on it, **releases** it when done, and a
colleague may **take it over** explicitly (naming whom they take it from, so a take-over never
lands on someone they did not see). Anyone with the permission may leave a **note**. Each is
recorded with its actor and time (``TaskCoordination``), and told in the task's history.

A claim is a coordination aid, not a lock: every action on the task stays open to every
operator with its permission. One who acts on a task a colleague holds is warned on the
confirmation page first, and the action works once they confirm.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from django.db import transaction
from django.db.models.functions import Now

from agentops.http import has_control
from agentops.models import NOTE_MAX, CoordinationKind, TaskClaim, TaskCoordination
from agentops.operators.readable import duration


class CoordinationRefused(ValueError):
    """A claim, release, take-over or note that cannot be made; ``str()`` says why."""


@dataclass(frozen=True)
class Hold:
    """Who holds a task, and since when."""

    holder: str
    since: datetime

    def ago(self, now: datetime) -> str:
        """``12 min``: how long it has been held."""
        seconds = max((now - self.since).total_seconds(), 0.0)
        return "less than a minute" if seconds < 60 else duration(seconds)


def hold_of(*, task_id: UUID) -> Hold | None:
    """Who holds the task now, if anyone."""
    claim = TaskClaim.objects.filter(task_id=task_id).exclude(holder="").first()
    if claim is None or claim.claimed_at is None:
        return None
    return Hold(claim.holder, claim.claimed_at)


def _locked(task_id: UUID) -> TaskClaim:
    """The task's claim row, made if it was never claimed, locked until the transaction ends:
    two operators claiming at once are served one after the other."""
    TaskClaim.objects.bulk_create([TaskClaim(task_id=task_id)], ignore_conflicts=True)
    return TaskClaim.objects.select_for_update().get(task_id=task_id)


def _record(task_id: UUID, kind: CoordinationKind, actor: str, **more: str) -> TaskCoordination:
    return TaskCoordination.objects.create(task_id=task_id, kind=kind, actor=actor, **more)


def task_claim(*, task_id: UUID, actor: str) -> bool:
    """``actor`` holds the task from now. Returns False if they held it already (nothing is
    recorded); refused if a colleague holds it (take it over instead)."""
    with transaction.atomic():
        claim = _locked(task_id)
        if claim.holder == actor:
            return False
        if claim.holder:
            raise CoordinationRefused(
                f"{claim.holder} holds this task already: take it over to hold it yourself"
            )
        TaskClaim.objects.filter(pk=claim.pk).update(holder=actor, claimed_at=Now())
        _record(task_id, CoordinationKind.CLAIMED, actor)
    return True


def task_take_over(*, task_id: UUID, actor: str, holder: str) -> None:
    """``actor`` takes the task over from ``holder``, the colleague they saw holding it;
    refused if someone else holds it by now (look again first). A task nobody holds any
    more is simply claimed."""
    with transaction.atomic():
        claim = _locked(task_id)
        if claim.holder == actor:
            return
        if not claim.holder:
            TaskClaim.objects.filter(pk=claim.pk).update(holder=actor, claimed_at=Now())
            _record(task_id, CoordinationKind.CLAIMED, actor)
            return
        if claim.holder != holder:
            raise CoordinationRefused(
                f"{claim.holder} holds this task now, not {holder or 'nobody'}: look at it "
                "again before taking it over"
            )
        TaskClaim.objects.filter(pk=claim.pk).update(holder=actor, claimed_at=Now())
        _record(task_id, CoordinationKind.TAKEN_OVER, actor, was=claim.holder)


def task_release(*, task_id: UUID, actor: str) -> None:
    """``actor`` no longer holds the task; refused unless they hold it."""
    with transaction.atomic():
        claim = _locked(task_id)
        if not claim.holder:
            raise CoordinationRefused("nobody holds this task: there is nothing to release")
        if claim.holder != actor:
            raise CoordinationRefused(
                f"{claim.holder} holds this task, not you: only its holder releases it (take "
                "it over to hold it yourself)"
            )
        TaskClaim.objects.filter(pk=claim.pk).update(holder="", claimed_at=None)
        _record(task_id, CoordinationKind.RELEASED, actor)


def note_problem(text: str) -> str:
    """Why a note cannot be kept, in a sentence; empty if it can."""
    if not text.strip():
        return "A note needs some text: write what you found or did."
    if len(text) > NOTE_MAX:
        return f"A note is at most {NOTE_MAX} characters; this one has {len(text)}."
    if has_control(text, allowed="\n\r\t"):
        return (
            "The note holds a control character (such as NUL) other than a line break or a "
            "tab: remove it and leave the note again."
        )
    return ""


def task_note(*, task_id: UUID, actor: str, text: str) -> TaskCoordination:
    """``actor`` leaves a note on the task; refused (with the sentence) if it is empty, too
    long or holds a control character."""
    problem = note_problem(text)
    if problem:
        raise CoordinationRefused(problem)
    return _record(task_id, CoordinationKind.NOTED, actor, text=text.strip())


def coordination_of(*, task_id: UUID) -> list[TaskCoordination]:
    """Every claim, release, take-over and note of the task, oldest first."""
    return list(TaskCoordination.objects.filter(task_id=task_id).order_by("at", "id"))
