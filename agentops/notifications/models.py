from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from journal.models import Entry, Task


class DeliveryState(models.TextChoices):
    """Where one notification stands. Three outcomes (docs/design.md §2), and two states
    before the first answer."""

    QUEUED = "queued", "queued"
    """Not sent yet, or every attempt so far provably never left (the receiver could not be
    reached): nothing has arrived. Given up so, it is ``not_done``."""
    SENDING = "sending", "in flight"
    """An attempt is out now. If its worker died, the next attempt counts it as one that may
    have arrived."""
    DONE = "done", "done"
    """The receiver answered 2xx. Carries its status, and its id for it if it gave one."""
    NOT_DONE = "not_done", "not done"
    """It certainly did not arrive: the receiver refused it (``misconfigured`` when it refused
    *us*: 401, 403, 404, 421), or it could never be sent while the key lived."""
    UNKNOWN = "unknown", "unknown"
    """It may have arrived: retried with the same key while the key lives, then given up."""


OPEN_STATES = (DeliveryState.QUEUED, DeliveryState.SENDING)
SETTLED_STATES = (DeliveryState.DONE, DeliveryState.NOT_DONE)


class Delivery(models.Model):
    """One notification of one journal entry (a task's status change) to ``NOTIFY_URL``.

    Derived from the entry (agentops/notifications/services.py), once: its key is unique.
    What is sent (``payload``), its key and how long the key is trusted never change; the rest
    is the record of its attempts. Open while ``next_attempt_at`` is set; ``settled_at`` says
    when it stopped being tried (done, not done, or given up unknown).
    """

    # No foreign keys in the database: the journal's tables are partitioned, and a range of
    # them is dropped whole (docs/design.md §17), with the deliveries about it.
    task = models.ForeignKey(
        Task, on_delete=models.PROTECT, related_name="+", db_index=False, db_constraint=False
    )
    entry = models.ForeignKey(
        Entry, on_delete=models.PROTECT, related_name="+", db_index=False, db_constraint=False
    )
    event = models.CharField(max_length=30, help_text="needs_human, finished, ...")
    key = models.CharField(max_length=255, unique=True, help_text="The Idempotency-Key sent.")
    payload = models.JSONField(help_text="The body, frozen when derived.")
    key_until = models.DateTimeField(help_text="Retries stop here: the key is trusted until.")
    state = models.CharField(max_length=10, choices=DeliveryState, default=DeliveryState.QUEUED)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_status = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="The last answer's HTTP status, if there was one."
    )
    detail = models.TextField(blank=True, help_text="The last answer, as classified.")
    evidence = models.JSONField(default=dict, blank=True)
    misconfigured = models.BooleanField(
        default=False, help_text="The receiver refused us (a secret, an address): ours to fix."
    )
    created_at = models.DateTimeField(db_default=Now())
    settled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["task", "id"]
        verbose_name_plural = "deliveries"
        constraints = [
            models.UniqueConstraint(fields=["entry"], name="agentops_delivery_one_per_entry"),
            models.CheckConstraint(
                condition=Q(state__in=DeliveryState.values), name="agentops_delivery_state_valid"
            ),
            # Open (a next attempt is due) exactly until it settles or is given up.
            models.CheckConstraint(
                condition=Q(settled_at__isnull=True, next_attempt_at__isnull=False)
                | Q(settled_at__isnull=False, next_attempt_at__isnull=True),
                name="agentops_delivery_open_until_settled",
            ),
            models.CheckConstraint(
                condition=~Q(state__in=SETTLED_STATES) | Q(settled_at__isnull=False),
                name="agentops_delivery_settled_states",
            ),
            models.CheckConstraint(
                condition=~Q(state__in=OPEN_STATES) | Q(settled_at__isnull=True),
                name="agentops_delivery_open_states",
            ),
        ]
        indexes = [
            # A task's page and the API read a task's deliveries.
            models.Index(fields=["task", "id"], name="agentops_delivery_task"),
            # The sweeper's "due" and the gauge: open deliveries only.
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(settled_at__isnull=True),
                name="agentops_delivery_open",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key} {self.event} [{self.state}]"

    @property
    def gave_up(self) -> bool:
        """Given up while it may have arrived: the key died before any answer said."""
        return self.state == DeliveryState.UNKNOWN and self.settled_at is not None


class DeliveryCursor(models.Model):
    """How far the journal's entries have been turned into deliveries: one row.

    Every status entry up to ``safe_entry_id`` has its delivery (or is of an event not
    notified). ``seen_entry_id`` is the highest entry id a derivation saw, and ``seen_xmax``
    its snapshot's ``xmax``: once no transaction older than that is running, the safe mark
    moves up to ``seen_entry_id`` (agentops/notifications/__init__.py).
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    safe_entry_id = models.BigIntegerField()
    seen_entry_id = models.BigIntegerField(null=True, blank=True)
    seen_xmax = models.BigIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="agentops_cursor_one_row")]

    def __str__(self) -> str:
        return f"notifications derived up to entry {self.safe_entry_id}"
