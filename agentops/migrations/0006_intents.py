"""Intents asked for over MCP, and clients' own keys for them (agentops/mcp, issue 18)."""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0005_api_clients"),
        ("journal", "0010_sql_files"),
    ]

    operations = [
        migrations.CreateModel(
            name="IntentKey",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("key", models.CharField(max_length=255, unique=True)),
                ("intent", models.CharField(max_length=100)),
                (
                    "object",
                    models.CharField(help_text="The effect's business object.", max_length=255),
                ),
                (
                    "args",
                    models.JSONField(
                        default=dict, help_text="The first call's arguments, normalised."
                    ),
                ),
                ("args_digest", models.CharField(max_length=64)),
                ("attempts", models.PositiveIntegerField(default=0)),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                ("updated_at", models.DateTimeField(blank=True, null=True)),
                (
                    "client",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="agentops.apiclient",
                    ),
                ),
                (
                    "task",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="journal.task",
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at"],
            },
        ),
        migrations.CreateModel(
            name="IntentClientKey",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("key", models.CharField(max_length=255)),
                ("args_digest", models.CharField(max_length=64)),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                (
                    "client",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        to="agentops.apiclient",
                    ),
                ),
                (
                    "intent",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="client_keys",
                        to="agentops.intentkey",
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("client", "key"), name="agentops_intent_client_key"
                    )
                ],
            },
        ),
    ]
