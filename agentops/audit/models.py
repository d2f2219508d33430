"""The provider audit's tables: each audit run, each finding (stored once), and what agentops
last saw of each provider (when its next audit is due, and which run of it answered)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from journal.models import Step, Task


class FindingKind(models.TextChoices):
    """What the audit found, comparing a provider's records with the journal, by key."""

    NO_STEP = "no_step", "no step made it"
    """The provider shows an effect carrying one of our keys, and no step has that key: it was
    made by something other than a step (by hand, by another system reusing a key)."""
    MISSING = "missing", "the provider does not show it"
    """A step is ``done``, and its provider's list (of the step's window) does not show its
    effect: it was removed, never happened as the journal believes, or is at another
    provider."""
    MISMATCH = "mismatch", "it differs from the step"
    """The effect carrying the step's key is not what the step decided: another amount,
    currency or recipient, or another kind of effect."""
    OFFSET_UNKNOWN = "offset_unknown", "undone at the provider"
    """The provider shows the effect undone (refunded, released, cancelled) and the journal
    knows no undo of it: someone undid it at the provider (its dashboard, support)."""
    OFFSET_MISSING = "offset_missing", "the provider shows it standing"
    """The journal says the effect was undone (its undo step is done), and the provider shows
    it standing."""
    NOT_DONE = "not_done", "it happened, the journal says not"
    """The step is ``not_done`` (certainly did not happen), and the provider shows its effect:
    the worst lie, since a task may have acted again on that belief."""
    DUPLICATE = "duplicate", "two effects for one step"
    """The provider shows more than one effect carrying the step's key: it acted twice."""


class AuditTrigger(models.TextChoices):
    SCHEDULE = "schedule", "scheduled"
    """The daily audit (``AUDIT_INTERVAL_SECONDS``), scheduled through RQ's scheduler."""
    RESTART = "restart", "provider restarted"
    """The provider answered as a new run at the same address: it may have lost what it had."""
    COMMAND = "command", "by hand"
    """``manage.py audit_providers``."""


class AuditRun(models.Model):
    """One audit of one provider: its window, what it listed, what it found new, or why it
    could not list (then nothing was judged missing)."""

    provider = models.CharField(max_length=50)
    trigger = models.CharField(max_length=10, choices=AuditTrigger)
    since = models.DateTimeField()
    until = models.DateTimeField()
    started_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)
    listed = models.PositiveIntegerField(default=0, help_text="Effects the provider listed.")
    found = models.PositiveIntegerField(default=0, help_text="Findings new in this run.")
    error = models.TextField(blank=True, help_text="Why the provider could not be listed.")

    class Meta:
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["provider", "-started_at"], name="agentops_audit_run_last")]

    def __str__(self) -> str:
        return f"audit of {self.provider} at {self.started_at:%Y-%m-%d %H:%M}"


class FindingQuerySet(models.QuerySet["Finding"]):
    def open(self) -> FindingQuerySet:
        return self.filter(resolved_at__isnull=True)


class Finding(models.Model):
    """What the provider's records and the journal disagree on, stored once.

    Its natural key is (provider, kind, the provider's id for the effect, our key): an audit
    that finds it again adds nothing. Both sides' evidence is kept as found; a person resolves
    it once, saying why (who, when and why are kept, and journaled on its task).
    """

    provider = models.CharField(max_length=50)
    kind = models.CharField(max_length=20, choices=FindingKind)
    effect_id = models.CharField(
        max_length=255, blank=True, help_text="The provider's id for the effect ('' if none)."
    )
    key = models.CharField(max_length=255, blank=True, help_text="The step key it carries.")
    # No foreign keys in the database: the journal's tables are partitioned, and a range of
    # them is dropped whole (docs/design.md §17), with the findings about it.
    task = models.ForeignKey(
        Task,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    step = models.ForeignKey(
        Step,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    run = models.ForeignKey(
        AuditRun, on_delete=models.PROTECT, related_name="findings", db_index=False
    )
    summary = models.TextField()
    provider_side = models.JSONField(default=dict, blank=True)
    journal_side = models.JSONField(default=dict, blank=True)
    differences = models.JSONField(default=dict, blank=True)
    found_at = models.DateTimeField(db_default=Now())
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.CharField(max_length=200, blank=True)
    resolution = models.TextField(blank=True, help_text="Why it was resolved, as said.")

    objects = FindingQuerySet.as_manager()

    class Meta:
        ordering = ["-found_at", "-id"]
        permissions = [("resolve_finding", "Can resolve a provider audit finding")]
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "kind", "effect_id", "key"], name="agentops_audit_finding_once"
            ),
            models.CheckConstraint(
                condition=Q(kind__in=FindingKind.values), name="agentops_audit_finding_kind_valid"
            ),
            # Resolved means someone said who and why.
            models.CheckConstraint(
                condition=Q(resolved_at__isnull=True, resolved_by="", resolution="")
                | (Q(resolved_at__isnull=False) & ~Q(resolved_by="") & ~Q(resolution="")),
                name="agentops_audit_finding_resolved_by_whom_why",
            ),
        ]
        indexes = [
            # The page's default view and the gauge: open findings, newest first.
            models.Index(
                fields=["-found_at"],
                condition=Q(resolved_at__isnull=True),
                name="agentops_audit_finding_open",
            ),
            models.Index(
                fields=["task"], condition=Q(task__isnull=False), name="agentops_audit_finding_task"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider} {self.kind} {self.effect_id or self.key}"

    @property
    def is_open(self) -> bool:
        return self.resolved_at is None


class ProviderWatch(models.Model):
    """What agentops last saw of one provider: when its next scheduled audit is due, when its
    last audit that could list ended, and which run of it answered at which address (a new
    run at the same one is a restart)."""

    provider = models.CharField(max_length=50, unique=True)
    next_audit_at = models.DateTimeField(null=True, blank=True)
    audited_at = models.DateTimeField(null=True, blank=True)
    address = models.CharField(max_length=500, blank=True)
    boot = models.CharField(max_length=200, blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"watch of {self.provider}"
