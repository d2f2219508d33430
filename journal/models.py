"""The journal's tables: Task, Step, Entry (DESIGN §4).

PostgreSQL backs the rules, not only this code: entries are append-only (a trigger), a
step's identity (key, tool, arguments) is frozen and a settled step never changes state (a
trigger), and one live effect per business object (a partial unique index). See the
migrations for the SQL.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from journal.keys import step_id
from journal.outcomes import LIVE_STATES, SETTLED_STATES, StepState


class TaskStatus(models.TextChoices):
    RUNNING = "running", "running"
    """Runnable: its holder (or the next runner) decides and performs the next step."""
    WAITING = "waiting", "waiting"
    """A step is unknown and a lookup is scheduled (the step's ``next_check_at``)."""
    NEEDS_HUMAN = "needs_human", "needs a human"
    """The journal cannot settle it alone; ``attention`` says why."""
    FINISHED = "finished", "finished"
    """The planner decided the task is over; that decision is its last step."""


class StepKind(models.TextChoices):
    CALL = "call", "tool call"
    """A decided call of a tool."""
    FINISH = "finish", "finish"
    """The decision that the task is over."""


class TaskQuerySet(models.QuerySet["Task"]):
    def needing_attention(self) -> TaskQuerySet:
        return self.filter(status=TaskStatus.NEEDS_HUMAN)


class Task(models.Model):
    """One agent run: its goal, its business references, and who may advance it now."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=100)
    goal = models.TextField()
    refs = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=20, choices=TaskStatus, default=TaskStatus.RUNNING)
    attention = models.TextField(blank=True, help_text="Why a human is needed, when one is.")
    step_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now())
    # The lease (DESIGN §11): one runner at a time, judged by the database clock. Every
    # acquisition increments the token; every journal write checks it (fencing).
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_token = models.BigIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True)

    objects = TaskQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=TaskStatus.values), name="journal_task_status_valid"
            ),
        ]
        indexes = [
            # "Tasks runnable without a live lease": the sweeper's query.
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(status__in=[TaskStatus.RUNNING, TaskStatus.WAITING]),
                name="journal_task_runnable",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.id}"


class StepQuerySet(models.QuerySet["Step"]):
    def live(self) -> StepQuerySet:
        return self.filter(state__in=LIVE_STATES)

    def unknown(self) -> StepQuerySet:
        return self.filter(state=StepState.UNKNOWN)

    def due_for_lookup(self) -> StepQuerySet:
        return self.filter(state=StepState.UNKNOWN, next_check_at__lte=Now())


class Step(models.Model):
    """One decided action. The planner's decision *is* this record; it is never re-asked."""

    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="steps")
    n = models.PositiveIntegerField()
    kind = models.CharField(max_length=10, choices=StepKind, default=StepKind.CALL)
    tool = models.CharField(max_length=100, blank=True)
    args = models.JSONField(default=dict, blank=True)
    key = models.CharField(max_length=255, unique=True)
    cost = models.CharField(max_length=10, blank=True)
    # NULL, not "", means "acts on no business object": the guard's unique index skips it.
    guard = models.CharField(  # noqa: DJ001
        max_length=255, null=True, blank=True, help_text="The business object acted on."
    )
    state = models.CharField(max_length=10, choices=StepState, default=StepState.PENDING)
    detail = models.TextField(blank=True)
    outcome = models.JSONField(default=dict, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    lookups = models.PositiveIntegerField(default=0)
    first_started_at = models.DateTimeField(null=True, blank=True)
    settled_at = models.DateTimeField(null=True, blank=True)
    next_check_at = models.DateTimeField(null=True, blank=True)
    decision = models.JSONField(default=dict, blank=True, help_text="The planner's raw output.")
    created_at = models.DateTimeField(db_default=Now())

    objects = StepQuerySet.as_manager()

    class Meta:
        ordering = ["task", "n"]
        constraints = [
            models.UniqueConstraint(fields=["task", "n"], name="journal_step_task_n_unique"),
            models.CheckConstraint(
                condition=Q(state__in=StepState.values), name="journal_step_state_valid"
            ),
            models.CheckConstraint(
                condition=Q(state__in=SETTLED_STATES, settled_at__isnull=False)
                | Q(state__in=LIVE_STATES, settled_at__isnull=True),
                name="journal_step_settled_at_iff_settled",
            ),
            # The guard (DESIGN §6): while an effect on an object is in flight or unknown,
            # no second one may be recorded. Refusals are caught by constraint name.
            models.UniqueConstraint(
                fields=["guard"],
                condition=Q(state__in=LIVE_STATES, guard__isnull=False),
                name="journal_step_one_live_effect_per_object",
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_check_at"],
                condition=Q(state=StepState.UNKNOWN),
                name="journal_step_due_for_lookup",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.step_id} {self.tool or self.kind} [{self.state}]"

    @property
    def step_id(self) -> str:
        return step_id(self.task_id, self.n)

    @property
    def is_settled(self) -> bool:
        return self.state in SETTLED_STATES

    @property
    def evidence(self) -> dict[str, Any]:
        evidence = self.outcome.get("evidence", {})
        return dict(evidence) if isinstance(evidence, dict) else {}


class EntryKind(models.TextChoices):
    TASK_CREATED = "task_created", "task created"
    """A task was started, with its goal and references."""
    STEP_RECORDED = "step_recorded", "step recorded"
    """A decision was written down with its key and frozen arguments."""
    DECISION_REJECTED = "decision_rejected", "decision rejected"
    """The planner asked for an unknown tool or gave invalid arguments; nothing ran."""
    GUARD_REFUSED = "guard_refused", "guard refused"
    """Another effect on the same object was in flight or unknown; this one was not started."""
    ATTEMPT_STARTED = "attempt_started", "attempt started"
    """A call is about to leave, with the step's key."""
    ATTEMPT_ENDED = "attempt_ended", "attempt ended"
    """What the call saw, with the raw error class, and how it was classified."""
    LOOKUP = "lookup", "lookup"
    """The provider was asked what happened under the step's key."""
    WEBHOOK_RECEIVED = "webhook_received", "webhook received"
    """A provider's signed notification about the step arrived (with its event id)."""
    STEP_SETTLED = "step_settled", "step settled"
    """The step's outcome changed: done, not done or unknown, and by what."""
    CONFLICT = "conflict", "conflict"
    """A settled step was reported otherwise later; the step kept its outcome."""
    TASK_WAITING = "task_waiting", "task waiting"
    """A step is unknown; the task waits for its lookup."""
    TASK_FLAGGED = "task_flagged", "task needs a human"
    """The journal cannot settle the task alone."""
    TASK_FINISHED = "task_finished", "task finished"
    """The planner decided the task is over."""
    OPERATOR_ACTION = "operator_action", "operator action"
    """A person did something (with who, in ``actor``)."""


class Entry(models.Model):
    """One event in the life of a task. Never updated or deleted: PostgreSQL refuses it."""

    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="entries")
    step = models.ForeignKey(
        Step, on_delete=models.PROTECT, null=True, blank=True, related_name="entries"
    )
    kind = models.CharField(max_length=30, choices=EntryKind)
    at = models.DateTimeField(db_default=Now())
    actor = models.CharField(max_length=200, blank=True)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "entries"
        indexes = [models.Index(fields=["task", "id"], name="journal_entry_task_id")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.kind}"
