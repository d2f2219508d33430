"""The provider audit (agentops/audit, issue 20): each audit run, each finding (stored once by its
natural key), and what was last seen of each provider."""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("journal", "0011_audit_finding"),
    ]

    operations = [
        migrations.CreateModel(
            name="ProviderWatch",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("provider", models.CharField(max_length=50, unique=True)),
                ("next_audit_at", models.DateTimeField(blank=True, null=True)),
                ("audited_at", models.DateTimeField(blank=True, null=True)),
                ("address", models.CharField(blank=True, max_length=500)),
                ("boot", models.CharField(blank=True, max_length=200)),
                ("checked_at", models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.CreateModel(
            name="AuditRun",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("provider", models.CharField(max_length=50)),
                (
                    "trigger",
                    models.CharField(
                        choices=[
                            ("schedule", "scheduled"),
                            ("restart", "provider restarted"),
                            ("command", "by hand"),
                        ],
                        max_length=10,
                    ),
                ),
                ("since", models.DateTimeField()),
                ("until", models.DateTimeField()),
                (
                    "started_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "listed",
                    models.PositiveIntegerField(
                        default=0, help_text="Effects the provider listed."
                    ),
                ),
                (
                    "found",
                    models.PositiveIntegerField(default=0, help_text="Findings new in this run."),
                ),
                (
                    "error",
                    models.TextField(blank=True, help_text="Why the provider could not be listed."),
                ),
            ],
            options={
                "ordering": ["-started_at"],
                "indexes": [
                    models.Index(fields=["provider", "-started_at"], name="agentops_audit_run_last")
                ],
            },
        ),
        migrations.CreateModel(
            name="Finding",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("provider", models.CharField(max_length=50)),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("no_step", "no step made it"),
                            ("missing", "the provider does not show it"),
                            ("mismatch", "it differs from the step"),
                            ("offset_unknown", "undone at the provider"),
                            ("offset_missing", "the provider shows it standing"),
                            ("not_done", "it happened, the journal says not"),
                            ("duplicate", "two effects for one step"),
                        ],
                        max_length=20,
                    ),
                ),
                (
                    "effect_id",
                    models.CharField(
                        blank=True,
                        help_text="The provider's id for the effect ('' if none).",
                        max_length=255,
                    ),
                ),
                (
                    "key",
                    models.CharField(
                        blank=True, help_text="The step key it carries.", max_length=255
                    ),
                ),
                ("summary", models.TextField()),
                ("provider_side", models.JSONField(blank=True, default=dict)),
                ("journal_side", models.JSONField(blank=True, default=dict)),
                ("differences", models.JSONField(blank=True, default=dict)),
                (
                    "found_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                ("resolved_at", models.DateTimeField(blank=True, null=True)),
                ("resolved_by", models.CharField(blank=True, max_length=200)),
                (
                    "resolution",
                    models.TextField(blank=True, help_text="Why it was resolved, as said."),
                ),
                (
                    "run",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="findings",
                        to="agentops_audit.auditrun",
                    ),
                ),
                (
                    "step",
                    models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="journal.step",
                    ),
                ),
                (
                    "task",
                    models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="journal.task",
                    ),
                ),
            ],
            options={
                "ordering": ["-found_at", "-id"],
                "permissions": [("resolve_finding", "Can resolve a provider audit finding")],
                "indexes": [
                    models.Index(
                        condition=models.Q(("resolved_at__isnull", True)),
                        fields=["-found_at"],
                        name="agentops_audit_finding_open",
                    ),
                    models.Index(
                        condition=models.Q(("task__isnull", False)),
                        fields=["task"],
                        name="agentops_audit_finding_task",
                    ),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("provider", "kind", "effect_id", "key"),
                        name="agentops_audit_finding_once",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            (
                                "kind__in",
                                [
                                    "no_step",
                                    "missing",
                                    "mismatch",
                                    "offset_unknown",
                                    "offset_missing",
                                    "not_done",
                                    "duplicate",
                                ],
                            )
                        ),
                        name="agentops_audit_finding_kind_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(
                                ("resolution", ""),
                                ("resolved_at__isnull", True),
                                ("resolved_by", ""),
                            ),
                            models.Q(
                                ("resolved_at__isnull", False),
                                models.Q(("resolved_by", ""), _negated=True),
                                models.Q(("resolution", ""), _negated=True),
                            ),
                            _connector="OR",
                        ),
                        name="agentops_audit_finding_resolved_by_whom_why",
                    ),
                ],
            },
        ),
    ]
