"""Notifications out (agentops/notifications, issue 20): each delivery of a task's status
change to NOTIFY_URL, and how far the journal's entries were turned into them."""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("journal", "0010_sql_files"),
    ]

    operations = [
        migrations.CreateModel(
            name="DeliveryCursor",
            fields=[
                (
                    "id",
                    models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False),
                ),
                ("safe_entry_id", models.BigIntegerField()),
                ("seen_entry_id", models.BigIntegerField(blank=True, null=True)),
                ("seen_xmax", models.BigIntegerField(blank=True, null=True)),
                (
                    "updated_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
            ],
            options={
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("id", 1)), name="agentops_cursor_one_row"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="Delivery",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("event", models.CharField(help_text="needs_human, finished, ...", max_length=30)),
                (
                    "key",
                    models.CharField(
                        help_text="The Idempotency-Key sent.", max_length=255, unique=True
                    ),
                ),
                ("payload", models.JSONField(help_text="The body, frozen when derived.")),
                (
                    "key_until",
                    models.DateTimeField(help_text="Retries stop here: the key is trusted until."),
                ),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("queued", "queued"),
                            ("sending", "in flight"),
                            ("done", "done"),
                            ("not_done", "not done"),
                            ("unknown", "unknown"),
                        ],
                        default="queued",
                        max_length=10,
                    ),
                ),
                ("attempts", models.PositiveIntegerField(default=0)),
                ("next_attempt_at", models.DateTimeField(blank=True, null=True)),
                ("last_attempt_at", models.DateTimeField(blank=True, null=True)),
                (
                    "last_status",
                    models.PositiveSmallIntegerField(
                        blank=True,
                        help_text="The last answer's HTTP status, if there was one.",
                        null=True,
                    ),
                ),
                (
                    "detail",
                    models.TextField(blank=True, help_text="The last answer, as classified."),
                ),
                ("evidence", models.JSONField(blank=True, default=dict)),
                (
                    "misconfigured",
                    models.BooleanField(
                        default=False,
                        help_text="The receiver refused us (a secret, an address): ours to fix.",
                    ),
                ),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                ("settled_at", models.DateTimeField(blank=True, null=True)),
                (
                    "entry",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="journal.entry",
                    ),
                ),
                (
                    "task",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="journal.task",
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "deliveries",
                "ordering": ["task", "id"],
                "indexes": [
                    models.Index(fields=["task", "id"], name="agentops_delivery_task"),
                    models.Index(
                        condition=models.Q(("settled_at__isnull", True)),
                        fields=["next_attempt_at"],
                        name="agentops_delivery_open",
                    ),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("entry",), name="agentops_delivery_one_per_entry"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("state__in", ["queued", "sending", "done", "not_done", "unknown"])
                        ),
                        name="agentops_delivery_state_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(
                                ("next_attempt_at__isnull", False), ("settled_at__isnull", True)
                            ),
                            models.Q(
                                ("next_attempt_at__isnull", True), ("settled_at__isnull", False)
                            ),
                            _connector="OR",
                        ),
                        name="agentops_delivery_open_until_settled",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("state__in", ("done", "not_done")), _negated=True),
                            ("settled_at__isnull", False),
                            _connector="OR",
                        ),
                        name="agentops_delivery_settled_states",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("state__in", ("queued", "sending")), _negated=True),
                            ("settled_at__isnull", True),
                            _connector="OR",
                        ),
                        name="agentops_delivery_open_states",
                    ),
                ],
            },
        ),
    ]
