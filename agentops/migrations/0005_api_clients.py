"""API clients and their Idempotency-Keys (agentops/api, issue 17)."""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0004_operator_groups"),
    ]

    operations = [
        migrations.CreateModel(
            name="ApiClient",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=100, unique=True)),
                ("prefix", models.CharField(max_length=32, unique=True)),
                ("token_hash", models.CharField(max_length=64)),
                ("scopes", models.JSONField(default=list)),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                ("revoked_at", models.DateTimeField(blank=True, null=True)),
                ("last_used_at", models.DateTimeField(blank=True, null=True)),
                ("rate_window", models.DateTimeField(blank=True, null=True)),
                ("rate_count", models.PositiveIntegerField(default=0)),
            ],
            options={
                "verbose_name": "API client",
                "ordering": ["name"],
            },
        ),
        migrations.CreateModel(
            name="IdempotencyKey",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("key", models.CharField(max_length=255)),
                ("fingerprint", models.CharField(max_length=64)),
                (
                    "state",
                    models.CharField(
                        choices=[("in_progress", "in progress"), ("completed", "completed")],
                        default="in_progress",
                        max_length=12,
                    ),
                ),
                ("response_status", models.PositiveSmallIntegerField(blank=True, null=True)),
                ("response_body", models.TextField(blank=True)),
                (
                    "claimed_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                ("expires_at", models.DateTimeField()),
                ("completed_at", models.DateTimeField(blank=True, null=True)),
                (
                    "client",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        to="agentops.apiclient",
                    ),
                ),
            ],
            options={
                "ordering": ["-claimed_at"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("client", "key"), name="agentops_idempotency_once"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("state__in", ["in_progress", "completed"])),
                        name="agentops_idempotency_state_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("state", "in_progress"),
                            models.Q(
                                ("completed_at__isnull", False), ("response_status__isnull", False)
                            ),
                            _connector="OR",
                        ),
                        name="agentops_idempotency_completed_has_response",
                    ),
                ],
            },
        ),
    ]
