from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now


class WebhookEvent(models.Model):
    """A provider notification, stored once by its id as it was received (dj-stripe), then
    verified and applied by a worker (agentops/provider_events.py).

    The web server stores the body and its signature as received (``payload``,
    ``signature``); a worker verifies the signature with the provider's secret, applies it,
    and keeps only the fields the journal needs (``facts``): the payload is emptied once it is
    applied (a PaymentIntent carries its ``client_secret``).
    """

    id = models.CharField(primary_key=True, max_length=255)
    provider = models.CharField(max_length=50)
    type = models.CharField(max_length=100)
    facts = models.JSONField(default=dict, blank=True)
    received_at = models.DateTimeField(db_default=Now())
    result = models.TextField(blank=True)
    payload = models.TextField(blank=True, help_text="The body as received, until applied.")
    signature = models.CharField(max_length=1000, blank=True)
    applied_at = models.DateTimeField(
        null=True, blank=True, help_text="When a worker verified and applied it."
    )

    class Meta:
        ordering = ["-received_at"]
        # Retention forgets the oldest (agentops_webhook_events_forget, migration 0008).
        indexes = [
            models.Index(fields=["received_at"], name="agentops_webhook_received"),
            # The sweeper's question: what was stored and not applied yet.
            models.Index(
                fields=["received_at"],
                condition=models.Q(applied_at__isnull=True),
                name="agentops_webhook_unapplied",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider} {self.type} {self.id}"


class ApiScope(models.TextChoices):
    """What an API client may do (agentops/api). Each is granted on its own."""

    TASKS_START = "tasks:start", "start tasks"
    """POST /api/v1/tasks: start a task (or be told its once-only effect is already done)."""
    METRICS_READ = "metrics:read", "read metrics"
    """GET /metrics: the Prometheus exposition (counts of tasks, steps, approvals, queues),
    from any address (agentops/telemetry/exposition.py)."""
    TASKS_READ = "tasks:read", "read tasks"
    """GET /api/v1/tasks and /api/v1/tasks/{id}: the tasks this client started (over the API
    or MCP), their steps, evidence and refs (which name customers' addresses)."""
    TASKS_READ_ALL = "tasks:read:all", "read every client's tasks"
    """``tasks:read`` for every task, whoever started it; over MCP, ``effects_for`` and
    ``check_effect`` tell of every task too."""
    TASKS_APPROVE = "tasks:approve", "approve or reject held steps"
    """POST …/approve and …/reject: decide a saga's step held for a person, in a task this
    client started."""
    TASKS_APPROVE_ALL = "tasks:approve:all", "approve or reject held steps of every client's tasks"
    """``tasks:approve`` for every task, whoever started it."""
    TASKS_OPERATE = "tasks:operate", "resume, cancel and reconcile tasks"
    """POST …/resume, …/cancel and …/reconcile: what an operator does to a task handed over,
    in a task this client started."""
    TASKS_OPERATE_ALL = "tasks:operate:all", "resume, cancel and reconcile every client's tasks"
    """``tasks:operate`` for every task, whoever started it."""
    MCP = "mcp", "use agentops over MCP"
    """The MCP server (agentops/mcp, ``manage.py mcp_server``): ask for the installed apps'
    intents (each a task, as this client) and read what the journal knows of effects — of
    the tasks this client started, or every task with ``tasks:read:all``."""


EVERY_TASK: dict[str, str] = {
    ApiScope.TASKS_READ.value: ApiScope.TASKS_READ_ALL.value,
    ApiScope.TASKS_APPROVE.value: ApiScope.TASKS_APPROVE_ALL.value,
    ApiScope.TASKS_OPERATE.value: ApiScope.TASKS_OPERATE_ALL.value,
}
"""A scope on the tasks a client started, and the scope that widens it to every task (and
grants it: a client with ``tasks:read:all`` reads its own tasks too)."""


class ApiClient(models.Model):
    """A program that uses the HTTP API, known by a token of its own (agentops/api/auth.py).

    Only the token's first characters (``prefix``, to find the row) and its SHA-256 are kept,
    never the token: it is shown once, when the client is created. A revoked client is kept,
    so the journal's ``api:<name>`` entries still name someone who existed.
    """

    name = models.CharField(max_length=100, unique=True)
    prefix = models.CharField(max_length=32, unique=True)
    token_hash = models.CharField(max_length=64)
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(db_default=Now())
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    # The rate limit's fixed window (agentops/api/auth.py): its start and the requests in it.
    rate_window = models.DateTimeField(null=True, blank=True)
    rate_count = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["name"]
        verbose_name = "API client"

    def __str__(self) -> str:
        return f"api:{self.name}"

    @property
    def actor(self) -> str:
        """Who the journal says acted, for everything this client does."""
        return f"api:{self.name}"

    @property
    def actors(self) -> tuple[str, str]:
        """Who the journal says started a task this client started: over the HTTP API
        (``api:<name>``) or over MCP (``mcp:<name>``), the same program with the same token."""
        return f"api:{self.name}", f"mcp:{self.name}"

    def may(self, scope: str) -> bool:
        """Whether the token carries ``scope``, or the scope that widens it to every task."""
        return scope in self.scopes or EVERY_TASK.get(scope, scope) in self.scopes

    def sees_every_task(self, scope: str) -> bool:
        """Whether ``scope`` reaches every task for this client, not only those it started."""
        wider = EVERY_TASK.get(scope)
        return wider is not None and wider in self.scopes


class IdempotencyState(models.TextChoices):
    IN_PROGRESS = "in_progress", "in progress"
    """Claimed: a request with this key is being answered, or died before it answered (then
    its work rolled back with it, and the next request with the key does it)."""
    COMPLETED = "completed", "completed"
    """Answered: the response is stored, and replayed to every request with the key and the
    same body until the key expires."""


class IdempotencyKey(models.Model):
    """One client's ``Idempotency-Key`` and the first answer to it (agentops/api/idempotency.py).

    Inserted, in its own transaction, before the work; completed in the same transaction as
    the work, under this row's lock, so the answer is stored exactly when the work commits.
    """

    client = models.ForeignKey(ApiClient, on_delete=models.PROTECT, db_index=False)
    key = models.CharField(max_length=255)
    # sha256 of the method, the path and the body: the same key with another request is 422.
    fingerprint = models.CharField(max_length=64)
    state = models.CharField(
        max_length=12, choices=IdempotencyState, default=IdempotencyState.IN_PROGRESS
    )
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_body = models.TextField(blank=True)
    claimed_at = models.DateTimeField(db_default=Now())
    expires_at = models.DateTimeField()
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-claimed_at"]
        constraints = [
            models.UniqueConstraint(fields=["client", "key"], name="agentops_idempotency_once"),
            models.CheckConstraint(
                condition=Q(state__in=IdempotencyState.values),
                name="agentops_idempotency_state_valid",
            ),
            models.CheckConstraint(
                condition=Q(state=IdempotencyState.IN_PROGRESS)
                | Q(response_status__isnull=False, completed_at__isnull=False),
                name="agentops_idempotency_completed_has_response",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.client_id}:{self.key} [{self.state}]"


class IntentKey(models.Model):
    """One business intent asked for over MCP, by its key (agentops/mcp/services.py).

    The key is derived from the intent and the business object of its effect
    (``charge_invoice:charge:inv-2291``, in the journal's normal form), never from a request:
    every call for the same effect — repeated after a timeout, from another client, with the
    invoice spelt otherwise — finds this row and the task it started, instead of acting again.
    ``task`` is empty until a task is started, and moves to a new task only when the last one
    ended without its effect ever happening (``attempts`` counts them).
    """

    key = models.CharField(max_length=255, unique=True)
    intent = models.CharField(max_length=100)
    object = models.CharField(max_length=255, help_text="The effect's business object.")
    args = models.JSONField(default=dict, help_text="The first call's arguments, normalised.")
    args_digest = models.CharField(max_length=64)
    client = models.ForeignKey(
        ApiClient, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    # No foreign key in the database: the journal's tables are partitioned, and a range of
    # them is dropped whole (docs/design.md §17); the journal's retention unlinks its intents.
    task = models.ForeignKey(
        "journal.Task",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_constraint=False,
    )
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.key


class IntentClientKey(models.Model):
    """A client's own idempotency key for an intent (MCP's ``idempotencyKey``): another name
    for the same intent, unique per client. The same key with other arguments is refused."""

    client = models.ForeignKey(ApiClient, on_delete=models.PROTECT, db_index=False)
    key = models.CharField(max_length=255)
    intent = models.ForeignKey(IntentKey, on_delete=models.PROTECT, related_name="client_keys")
    args_digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["client", "key"], name="agentops_intent_client_key"),
        ]

    def __str__(self) -> str:
        return f"{self.client_id}:{self.key}"


# --- Operators coordinating on a task (issue 38) -------------------------------------------------

NOTE_MAX = 2000
"""The longest note an operator may leave on a task, in characters."""


class TaskClaim(models.Model):
    """Who holds a task now: the operator working on it, so that a colleague knows before
    acting (agentops/operators/claims.py). One row per task, made at its first claim and kept
    (the app may not DELETE): released, its ``holder`` is empty.

    A claim is a coordination aid, not a lock: every action stays open to every operator with
    its permission; one acting on a task someone else holds is warned first.
    """

    # No foreign key in the database: the journal's tables are partitioned (see IntentKey).
    task = models.OneToOneField(
        "journal.Task", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    holder = models.CharField(max_length=150, blank=True, help_text="Empty: nobody holds it.")
    claimed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        permissions = [("claim_task", "Can claim, release and take over a task")]
        constraints = [
            models.CheckConstraint(
                condition=Q(holder="", claimed_at__isnull=True)
                | (~Q(holder="") & Q(claimed_at__isnull=False)),
                name="agentops_taskclaim_held_since",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.task_id} held by {self.holder or 'nobody'}"


class CoordinationKind(models.TextChoices):
    CLAIMED = "claimed", "claimed the task"
    RELEASED = "released", "released the task"
    TAKEN_OVER = "taken_over", "took the task over"
    NOTED = "noted", "left a note"


class TaskCoordination(models.Model):
    """What an operator did to coordinate on a task — claimed it, released it, took it over
    from a colleague, left a note — with who and when. Append-only: inserted once, never
    changed; the task's history tells it beside the journal's entries."""

    task = models.ForeignKey(
        "journal.Task", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    kind = models.CharField(max_length=12, choices=CoordinationKind)
    actor = models.CharField(max_length=150)
    at = models.DateTimeField(db_default=Now())
    text = models.CharField(max_length=NOTE_MAX, blank=True, help_text="A note's text.")
    was = models.CharField(
        max_length=150, blank=True, help_text="Who held the task before a take-over."
    )

    class Meta:
        ordering = ["at", "id"]
        permissions = [("note_task", "Can leave notes on a task")]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=CoordinationKind.values),
                name="agentops_taskcoordination_kind_valid",
            ),
            models.CheckConstraint(condition=~Q(actor=""), name="agentops_taskcoordination_actor"),
            models.CheckConstraint(
                condition=~Q(kind=CoordinationKind.NOTED) | ~Q(text=""),
                name="agentops_taskcoordination_note_has_text",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.task_id}: {self.actor} {self.kind}"
