"""The journal's tables: Task, Step, Entry (docs/design.md §4).

PostgreSQL backs the rules, not only this code: entries are append-only (a trigger); a
step's identity (key, tool, arguments, object) is frozen and a settled step never changes
state (a trigger); one live effect per business object, and one standing once-only effect
per object (partial unique indexes); a task's status moves only along
``journal.status.TRANSITIONS`` (a trigger). See the migrations for the SQL.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from django.contrib.postgres.indexes import BrinIndex
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.db.models.base import ModelState
from django.db.models.functions import Now
from django.db.models.signals import post_init, pre_init

from journal.keys import step_id, task_id_new
from journal.outcomes import LIVE_STATES, SETTLED_STATES, StepState

if TYPE_CHECKING:
    _Integer = models.IntegerField[int, int]
else:
    _Integer = models.IntegerField


class CountField(_Integer):
    """A count or a number, never negative (as a PositiveIntegerField), but held to it by the
    journal's triggers (journal_task_rules, journal_step_born, journal_step_moves) rather than
    by a CHECK constraint, which PostgreSQL reads and plans again at every statement that
    writes the row (docs/design.md §14). Django validates it as it would a positive one."""

    default_validators = [MinValueValidator(0)]

    def formfield(self, **kwargs: Any) -> Any:
        return super().formfield(**{"min_value": 0, **kwargs})


class TaskStatus(models.TextChoices):
    """Where a task is. Changed only by ``journal.status.task_transition``."""

    RUNNABLE = "runnable", "runnable"
    """It can advance now. A worker may hold its lease (then it is running) or not yet."""
    WAITING = "waiting", "waiting"
    """It waits until ``wake_at``: for an unknown step's next lookup, or a retry's backoff."""
    AWAITING_APPROVAL = "awaiting_approval", "awaiting approval"
    """A saga is held before a step until a person approves or rejects it (an Approval)."""
    NEEDS_HUMAN = "needs_human", "needs a human"
    """The harness cannot go on alone; ``attention_code`` and ``attention`` say why."""
    FINISHED = "finished", "finished"
    """Over: the planner decided so, and that decision is its last step."""
    CANCELLED = "cancelled", "cancelled"
    """An operator stopped it (recorded with who and why); no step of it is open."""
    COMPENSATED = "compensated", "compensated"
    """Over: a saga that could not complete, every done effect undone by its compensation."""


class Attention(models.TextChoices):
    """Why a task needs a human, as a code beside the sentence in ``Task.attention``."""

    CONFLICT = "conflict", "conflicting reports"
    """A settled step was reported otherwise (a webhook, a lookup), or a report did not match
    the step it named; the step kept its outcome."""
    KEY_DEAD = "key_dead", "key expired"
    """A step is unknown, the provider no longer remembers its key, and no lookup found it."""
    ROUNDS_EXHAUSTED = "rounds_exhausted", "reconciliation rounds used up"
    """A step is still unknown after every scheduled reconciliation round."""
    PLANNER_FAILED = "planner_failed", "planner failed"
    """The planner raised instead of deciding; nothing was recorded for that decision."""
    HARNESS_FAILED = "harness_failed", "harness failed"
    """A tool adapter or the harness itself raised while advancing the task."""
    STEP_LIMIT = "step_limit", "step limit reached"
    """The task recorded as many steps as its kind allows without finishing."""
    RUN_FAILURES = "run_failures", "runs keep failing"
    """Several runs in a row ended without finishing cleanly (crashed workers, lost database)."""
    TOOL_MISSING = "tool_missing", "tool unavailable"
    """A step is open and its tool is not available to look it up."""
    KEY_MISUSED = "key_misused", "key used with other arguments"
    """The provider says the step's key was used with other arguments: a bug, and the first
    use may have acted."""
    COMPENSATION_FAILED = "compensation_failed", "a compensation did not happen"
    """A saga's undo was refused by the provider (or could not be sent, retries used up): the
    effect it should undo still stands."""
    MISCONFIGURED = "misconfigured", "our side is misconfigured"
    """The provider refused *us*, not the business action (our key is wrong or revoked, the
    address is not the provider's: 401, 403, 421, 404 on the tool's own endpoint, a name
    that never resolves), or the runner's planner or tools could not even be built. Nothing
    happened; once a person has fixed it and resumes the task, it is tried again."""
    EFFECT_LAPSED = "effect_lapsed", "an effect lapsed"
    """Something a saga holds no longer stands at the provider (a flight hold expired while
    it waited); nothing more was done on top of it."""
    PARKED = "parked", "parked"
    """Set aside on purpose (tests, maintenance)."""
    AUDIT_FINDING = "audit_finding", "the provider's records disagree"
    """The provider audit found the provider's records disagree with the task's steps (an
    effect refunded or cancelled at the provider, one it does not show, another amount); the
    finding says which, with both sides' evidence. Nothing was changed."""


class StepKind(models.TextChoices):
    CALL = "call", "tool call"
    """A decided call of a tool."""
    FINISH = "finish", "finish"
    """The decision that the task is over."""


class Status(models.Model):
    """A task's status as the database knows it: its label for sentences, and whether a task
    in it is over. Written from :class:`TaskStatus` and ``journal.status.FINAL`` by
    ``journal.status.status_machine_sync`` (migrations); read by the journal's functions."""

    status = models.CharField(max_length=20, primary_key=True, choices=TaskStatus)
    label = models.CharField(max_length=50)
    final = models.BooleanField()

    class Meta:
        db_table = "journal_status"

    def __str__(self) -> str:
        return self.status


class StatusMove(models.Model):
    """One move of a task's state machine (``journal.status.TRANSITIONS``, written here by
    ``journal.status.status_machine_sync``): ``journal_transition`` makes no other."""

    from_status = models.CharField(max_length=20, choices=TaskStatus)
    to_status = models.CharField(max_length=20, choices=TaskStatus)

    class Meta:
        db_table = "journal_status_move"
        constraints = [
            models.UniqueConstraint(
                fields=["from_status", "to_status"], name="journal_status_move_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.from_status} -> {self.to_status}"


class TaskQuerySet(models.QuerySet["Task"]):
    def needing_attention(self) -> TaskQuerySet:
        return self.filter(status=TaskStatus.NEEDS_HUMAN)


class Task(models.Model):
    """One agent run: its goal, its business references, and who may advance it now."""

    # Time-ordered (UUID version 7): the journal is partitioned by it (docs/design.md §17).
    id = models.UUIDField(primary_key=True, default=task_id_new, editable=False)
    kind = models.CharField(max_length=100)
    goal = models.TextField()
    refs = models.JSONField(default=dict, blank=True)
    # Changed only through journal.status.task_transition (a trigger refuses anything else).
    status = models.CharField(max_length=20, choices=TaskStatus, default=TaskStatus.RUNNABLE)
    attention_code = models.CharField(max_length=30, choices=Attention, blank=True)
    attention = models.TextField(blank=True, help_text="Why a human is needed, when one is.")
    wake_at = models.DateTimeField(
        null=True, blank=True, help_text="When a waiting task may advance again."
    )
    # A saga (docs/design.md §7): its plan, validated when the task was started, and whether it
    # is unwinding (compensating its done steps, newest first). Unwinding never stops.
    plan = models.JSONField(default=list, blank=True)
    unwinding = models.BooleanField(default=False)
    step_count = CountField(default=0)
    created_at = models.DateTimeField(db_default=Now())
    # The lease (docs/design.md §11): one runner at a time, judged by the database clock.
    # Every acquisition increments the token; every journal write checks it (fencing).
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_token = models.BigIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    lease_taken_at = models.DateTimeField(null=True, blank=True)
    # Bumped by every write to the task or its steps: its runner keeps the task's facts in
    # memory and reads them again only when a write was not its own (a webhook, a person).
    version = models.BigIntegerField(default=0)
    # Whether it ended without every effect it decided being done (a filter for operators;
    # the summary says which and why). Set once, when it finishes.
    shortfall = models.BooleanField(default=False)
    # Runs taken up since the last one that ended cleanly: a task whose runs keep dying
    # (a crashing worker, a lost database) is handed to a human instead of re-run forever.
    failed_runs = CountField(default=0)
    # How it ended, once it has (finished, cancelled, compensated; '' until then), kept when a
    # later report hands it to a person: finished means finished, so it never runs again and
    # goes back to this when resumed (journal/sql/journal_transition).
    ended_as = models.CharField(
        max_length=20, choices=TaskStatus, blank=True, default="", db_default=""
    )

    objects = TaskQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        # What an operator may do, each granted on its own (agentops/operators).
        permissions = [
            ("start_task", "Can start a task"),
            ("reconcile_step", "Can have a step reconciled now"),
            ("resolve_step", "Can settle a step by hand"),
            ("decide_approval", "Can approve or reject a held saga step"),
            ("compensate_saga", "Can have a saga compensate"),
            ("resume_task", "Can resume or cancel a task that needs a human"),
        ]
        # A task is in one of its statuses, one that waits has a time to wake and one in front
        # of a person a code: journal/sql/journal_task_rules, a trigger (docs/design.md §14).
        indexes = [
            # "Tasks that can advance and no live lease holds": the sweeper's query.
            models.Index(
                fields=["status", "wake_at"],
                condition=Q(status__in=[TaskStatus.RUNNABLE, TaskStatus.WAITING]),
                name="journal_task_advancing",
            ),
            # The operators' list: newest first, and by status.
            models.Index(fields=["-created_at"], name="journal_task_newest"),
            models.Index(fields=["status", "-created_at"], name="journal_task_status_newest"),
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


GUARD_CONSTRAINT = "journal_step_one_live_effect_per_object"
ONCE_CONSTRAINT = "journal_step_once_per_object"
UNDO_CONSTRAINT = "journal_step_one_undo_per_step"

# States in which an effect counts against its business object: it happened or may have.
STANDING_STATES = (StepState.PENDING, StepState.UNKNOWN, StepState.DONE)


class Step(models.Model):
    """One decided action. The planner's decision *is* this record; it is never re-asked."""

    # No index of its own: the unique (task, n) serves every read by task. No foreign key in
    # the database, here or below: the journal's tables are partitioned by task and a range
    # of all three is dropped at once; a step is born only into a task that exists and holds
    # its lease, undoing only a step of that task (journal/sql/journal_step_born).
    task = models.ForeignKey(
        Task, on_delete=models.PROTECT, related_name="steps", db_index=False, db_constraint=False
    )
    n = CountField()
    kind = models.CharField(max_length=10, choices=StepKind, default=StepKind.CALL)
    tool = models.CharField(max_length=100, blank=True)
    args = models.JSONField(default=dict, blank=True)
    # Unique with its task (journal_step_key_unique): a key is its task's own, so that is
    # unique across tasks too (journal_step_born).
    key = models.CharField(max_length=255)
    cost = models.CharField(max_length=10, blank=True)
    # NULL, not "", means "acts on no business object": the guards' unique indexes skip it.
    # `guard` is the object's name for people (journal.keys.object_label); `guard_key` is
    # what the guards compare: its normal form, or a digest of it when long (object_key).
    guard = models.CharField(  # noqa: DJ001
        max_length=255, null=True, blank=True, help_text="The business object acted on."
    )
    guard_key = models.CharField(  # noqa: DJ001
        max_length=255,
        null=True,
        blank=True,
        help_text="The object's name in its normal form, as the guards compare it.",
    )
    once = models.BooleanField(
        default=False, help_text="The effect happens once per object (unless offset)."
    )
    offsets = models.ForeignKey(
        "self",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        db_index=False,  # the partial unique index on standing undos serves it
        db_constraint=False,
        related_name="undos",
        help_text="The step of this task that this one undoes (a refund, release, cancel).",
    )
    offset_by = models.ForeignKey(
        "self",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        db_index=False,  # never searched by; steps are never deleted
        db_constraint=False,
        related_name="+",
        help_text="The done step that undid this one.",
    )
    retries = CountField(
        default=0, help_text="How many harness retries of a transient not-done came before."
    )
    undo_tool = models.CharField(
        max_length=100,
        blank=True,
        help_text="The tool that undoes this effect, declared before it ran ('' if none).",
    )
    refusal = models.CharField(
        max_length=30, blank=True, help_text="Why it was refused without running, as a code."
    )
    state = models.CharField(max_length=10, choices=StepState, default=StepState.PENDING)
    detail = models.TextField(blank=True)
    outcome = models.JSONField(default=dict, blank=True)
    attempts = CountField(default=0)
    lookups = CountField(default=0)
    first_started_at = models.DateTimeField(null=True, blank=True)
    # Frozen when the step is recorded, from the tool's declarations then: reconciliation
    # decides from the row, never from today's settings (docs/design.md §5).
    key_trusted_until = models.DateTimeField(null=True, blank=True)
    lookup_until = models.DateTimeField(null=True, blank=True)
    settled_at = models.DateTimeField(null=True, blank=True)
    next_check_at = models.DateTimeField(null=True, blank=True)
    decision = models.JSONField(default=dict, blank=True, help_text="The planner's raw output.")
    created_at = models.DateTimeField(db_default=Now())

    objects = StepQuerySet.as_manager()

    class Meta:
        ordering = ["task", "n"]
        constraints = [
            models.UniqueConstraint(fields=["task", "n"], name="journal_step_task_n_unique"),
            models.UniqueConstraint(fields=["key", "task"], name="journal_step_key_unique"),
            # A step is in one of its states and settled (settled_at) exactly when it is done
            # or not_done: journal/sql/journal_step_born and journal_step_moves, triggers
            # (docs/design.md §14).
            # The guards (docs/design.md §6) are not here: an index that named the state
            # would make every settlement rewrite every index of the step (no HOT update).
            # They are the claims below, kept by journal_step_claims.
        ]
        indexes = [
            # Only unknown steps have a next lookup time (set when one goes unknown, cleared
            # when it settles): so the index names no state, and a pending step's settlement
            # leaves it alone.
            models.Index(
                fields=["next_check_at"],
                condition=Q(next_check_at__isnull=False),
                name="journal_step_due_for_lookup",
            ),
            # Steps by state for the few questions asked across tasks (how many are unknown,
            # by tool): a summary of each range of pages (BRIN), which a HOT update keeps up
            # to date without blocking it, unlike a B-tree naming the state. Unknown steps
            # are rare, so few ranges have one.
            BrinIndex(fields=["state"], name="journal_step_state_ranges"),
            # Every step that acted, or would, on an object, by its normal form (people's and
            # clients' questions: what was done to this invoice?). The column never changes.
            models.Index(
                fields=["guard_key"],
                condition=Q(guard_key__isnull=False),
                name="journal_step_by_object",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.step_id} {self.tool or self.kind} [{self.state}]"

    @classmethod
    def written(cls, **values: Any) -> Step:
        """The step a journal statement just wrote, from what it wrote (``values``, by field
        name; every other field its default): made as Django makes a row it read, its fields
        set by name with no signal to send, not by the keyword path of ``Step(...)``, which
        costs the runner's step several times as much."""
        constants, made, known = _defaults()
        if not values.keys() <= known:
            raise TypeError(f"Step has no fields {sorted(values.keys() - known)}")
        row = {**constants, **{name: make() for name, make in made.items() if name not in values}}
        row.update(values)
        if pre_init.has_listeners(cls) or post_init.has_listeners(cls):
            return cls(**row)
        step = cls.__new__(cls)
        step._state = ModelState()
        step.__dict__.update(row)
        return step

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


class ObjectLive(models.Model):
    """An effect on a business object that is in flight or unknown: at most one per object,
    across tasks (docs/design.md §6). The row is the step's claim while it is open; the
    primary key is the guard (named ``GUARD_CONSTRAINT``). Kept by the database
    (``journal_step_claims``) as steps are recorded and settle; the app may only read it."""

    guard_key = models.CharField(max_length=255, primary_key=True)
    step = models.ForeignKey(
        Step, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )

    class Meta:
        db_table = "journal_object_live"

    def __str__(self) -> str:
        return f"{self.guard_key} (in flight: step {self.step_id})"


class ObjectOnce(models.Model):
    """An object's once-only effect that happened, or may have, and was not undone: at most
    one per object, for good (docs/design.md §6; the primary key is ``ONCE_CONSTRAINT``).
    Compact and kept apart from the steps, with what the refusal of a second effect names
    (the step's key, tool, evidence, when it settled), so it holds even when old steps are
    gone. Kept by the database (``journal_step_claims``); the app may only read it."""

    guard_key = models.CharField(max_length=255, primary_key=True)
    step = models.ForeignKey(
        Step, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    task_id = models.UUIDField()
    key = models.CharField(max_length=255)
    tool = models.CharField(max_length=100)
    evidence = models.JSONField(default=dict, blank=True)
    settled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "journal_object_once"

    def __str__(self) -> str:
        return f"{self.guard_key} (once: {self.key})"


class StepUndo(models.Model):
    """The one undo of a step that stands or may stand (the primary key is
    ``UNDO_CONSTRAINT``). Kept by the database (``journal_step_claims``)."""

    offsets = models.OneToOneField(
        Step,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        primary_key=True,
        related_name="+",
    )
    step = models.ForeignKey(
        Step, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )

    class Meta:
        db_table = "journal_step_undo"

    def __str__(self) -> str:
        return f"undo of step {self.offsets_id}: step {self.step_id}"


class EntryKind(models.TextChoices):
    TASK_CREATED = "task_created", "task created"
    """A task was started, with its goal and references."""
    STEP_RECORDED = "step_recorded", "step recorded"
    """A decision was written down with its key and frozen arguments."""
    DECISION_REJECTED = "decision_rejected", "decision rejected"
    """The planner asked for an unknown tool or gave invalid arguments; nothing ran."""
    DECISION_REFUSED = "decision_refused", "decision refused"
    """The arguments do not belong to the task (another amount, invoice, recipient, an effect
    this task did not make), or exceed its limits; nothing was sent."""
    GUARD_REFUSED = "guard_refused", "guard refused"
    """Another effect on the same object was in flight or unknown, or the object's once-only
    effect already happened; this one was not started."""
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
    """The task waits until a time: an unknown step's lookup, or a retry's backoff."""
    TASK_RESUMED = "task_resumed", "task resumed"
    """The task can advance again: woken by a settled step, its time, or a person."""
    TASK_FLAGGED = "task_flagged", "task needs a human"
    """The harness cannot go on alone (with an attention code and a reason)."""
    TASK_FINISHED = "task_finished", "task finished"
    """The planner decided the task is over, or a person confirmed it."""
    TASK_CANCELLED = "task_cancelled", "task cancelled"
    """A person stopped the task (with who and why)."""
    OPERATOR_ACTION = "operator_action", "operator action"
    """A person did something (with who, in ``actor``)."""
    APPROVAL_REQUESTED = "approval_requested", "approval requested"
    """A saga is held before a step: its tool, arguments and their digest await a person."""
    APPROVAL_DECIDED = "approval_decided", "approval decided"
    """A person approved or rejected a held step (or the request expired)."""
    SAGA_UNWINDING = "saga_unwinding", "saga unwinding"
    """A saga will not complete: its done steps are compensated, newest first, from now on."""
    EFFECT_CHECKED = "effect_checked", "effect checked"
    """Whether an earlier effect still stands at its provider, asked before relying on it."""
    AUDIT_FINDING = "audit_finding", "audit finding"
    """The provider audit found the provider's records disagree with this step (with the
    finding's id and kind); the step and its outcome were left as they are."""


class Entry(models.Model):
    """One event in the life of a task. Never updated or deleted: PostgreSQL refuses it."""

    # One index, (task, id): every read is by task, and entries are never deleted, so the
    # foreign keys need none of their own (each would cost every insert).
    # No foreign keys in the database (see Step.task): an entry is born only about a task
    # that exists and a step of that task (journal/sql/journal_entry_born).
    task = models.ForeignKey(
        Task, on_delete=models.PROTECT, related_name="entries", db_index=False, db_constraint=False
    )
    step = models.ForeignKey(
        Step,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="entries",
        db_index=False,
        db_constraint=False,
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


class ApprovalState(models.TextChoices):
    PENDING = "pending", "pending"
    """Asked for; nobody has decided yet."""
    APPROVED = "approved", "approved"
    """A person approved exactly this tool and these arguments; not used yet."""
    REJECTED = "rejected", "rejected"
    """A person rejected it: the saga compensates what it did."""
    USED = "used", "used"
    """The approved step was recorded (``used_by``); an approval is used once."""
    EXPIRED = "expired", "expired"
    """Too late: it was neither decided nor used before ``expires_at``."""


class Approval(models.Model):
    """A person's approval of one held step of a saga: bound to its tool and the digest of its
    arguments, who decided and when, valid until ``expires_at``, and used once."""

    # No foreign keys in the database (see Step.task): the journal's retention removes a
    # dropped range's approvals with it.
    task = models.ForeignKey(
        Task, on_delete=models.PROTECT, related_name="approvals", db_constraint=False
    )
    tool = models.CharField(max_length=100)
    args = models.JSONField(default=dict)
    digest = models.CharField(max_length=64, help_text="sha256 of the tool and its arguments.")
    reason = models.TextField(help_text="Why the step was held.")
    requested_at = models.DateTimeField(db_default=Now())
    expires_at = models.DateTimeField()
    state = models.CharField(max_length=10, choices=ApprovalState, default=ApprovalState.PENDING)
    decided_by = models.CharField(max_length=200, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.TextField(blank=True)
    used_by = models.OneToOneField(
        Step,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="approval",
        db_constraint=False,
    )

    class Meta:
        ordering = ["-requested_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=ApprovalState.values), name="journal_approval_state_valid"
            ),
            # A task waits for at most one decision at a time.
            models.UniqueConstraint(
                fields=["task"],
                condition=Q(state__in=[ApprovalState.PENDING, ApprovalState.APPROVED]),
                name="journal_approval_one_open_per_task",
            ),
            models.CheckConstraint(
                condition=Q(state=ApprovalState.USED, used_by__isnull=False)
                | (~Q(state=ApprovalState.USED) & Q(used_by__isnull=True)),
                name="journal_approval_used_iff_step",
            ),
        ]

    def __str__(self) -> str:
        return f"approval of {self.tool} for {self.task_id} [{self.state}]"


class DecisionAction(models.TextChoices):
    RESOLVE = "resolve", "settle by hand"
    """An open step of a task that needs a person, settled done (with the evidence they found)
    or not done (with why)."""
    CORRECT = "correct", "correct"
    """A step settled not done that happened after all: a step of its own, done, with the
    evidence they found."""


class Decision(models.Model):
    """A person's decision about what happened to a step, recorded by what faces the network
    (``journal_step_resolve``, ``journal_step_correct``) and applied by a worker
    (``journal_decision_apply``), which checks it again: the web server's role records
    people's decisions but settles no step (docs/design.md §4). Deleted with its task's range
    (``journal_partition_drop``)."""

    task = models.ForeignKey(
        Task, on_delete=models.DO_NOTHING, related_name="decisions", db_constraint=False
    )
    step = models.ForeignKey(
        Step, on_delete=models.DO_NOTHING, related_name="+", db_constraint=False, db_index=False
    )
    action = models.CharField(max_length=10, choices=DecisionAction)
    state = models.CharField(max_length=10, choices=StepState, help_text="What they found.")
    evidence = models.JSONField(default=dict, blank=True)
    label = models.CharField(max_length=200, blank=True, help_text="The evidence, in words.")
    reason = models.TextField()
    actor = models.CharField(max_length=200)
    decided_at = models.DateTimeField(db_default=Now())
    applied_at = models.DateTimeField(null=True, blank=True)
    result = models.TextField(blank=True, help_text="What applying it did, in a sentence.")

    class Meta:
        db_table = "journal_decision"
        ordering = ["decided_at"]
        indexes = [
            # The sweeper's question: what was decided and not applied yet.
            models.Index(
                fields=["decided_at"],
                condition=Q(applied_at__isnull=True),
                name="journal_decision_unapplied",
            )
        ]

    def __str__(self) -> str:
        return f"{self.action} of step {self.step_id} by {self.actor}"


class Partition(models.Model):
    """One range of time of the journal: the tasks made in it, their steps and entries, each
    table's partition named ``journal_<table>_<name>`` (docs/design.md §17). Made ahead of
    time by ``journal_partitions_ensure``; dropped, once every task in it is over and nothing
    has happened to any of them for the retention's keep, by ``journal_partition_drop``.
    Kept by the database; the app may only read it."""

    name = models.CharField(max_length=40, primary_key=True)
    starts = models.DateTimeField()
    ends = models.DateTimeField()
    made_at = models.DateTimeField(db_default=Now())
    dropped_at = models.DateTimeField(null=True, blank=True)
    tasks = models.BigIntegerField(null=True, blank=True, help_text="How many it held, dropped.")

    class Meta:
        db_table = "journal_partition"
        ordering = ["starts"]

    def __str__(self) -> str:
        return f"{self.name} [{self.starts:%Y-%m-%d %H:%M:%S}, {self.ends:%Y-%m-%d %H:%M:%S})"


class Retention(models.Model):
    """How the journal is partitioned and how long a range is kept once it is over: one row,
    set by the owner (``journal.retention.retention_configure``, run by ``migrate`` from the
    settings), read by the functions that make and drop partitions, so the app's role, which
    may call them, cannot drop what is younger than ``keep_seconds``."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    partition_seconds = models.FloatField()
    ahead = models.PositiveSmallIntegerField(help_text="How many ranges are made ahead.")
    keep_seconds = models.FloatField(
        null=True, blank=True, help_text="Kept this long after a range is over; null: for good."
    )

    class Meta:
        db_table = "journal_retention"

    def __str__(self) -> str:
        return f"partitions of {self.partition_seconds:.0f} s, kept {self.keep_seconds} s"


@lru_cache(maxsize=1)
def _defaults() -> tuple[dict[str, Any], dict[str, Any], frozenset[str]]:
    """Step's columns by attribute name, with their defaults: the values (None, 0, "", a
    choice: none is ever changed in place), and what makes a fresh one for the rest (``dict``
    for a JSON object, Django for a database default)."""
    constants: dict[str, Any] = {}
    made: dict[str, Any] = {}
    for field in Step._meta.concrete_fields:
        if field.has_default() and callable(field.default):
            made[field.attname] = field.default
        elif field.has_db_default():
            made[field.attname] = field.get_default
        else:
            constants[field.attname] = field.get_default()
    return constants, made, frozenset(constants) | frozenset(made)
