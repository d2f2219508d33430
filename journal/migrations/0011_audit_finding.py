"""The provider audit (agentops/audit): an attention code for a task whose provider's records
disagree with its steps, and the entry that says so on the step. Choices only: no SQL."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("journal", "0010_sql_files"),
    ]

    operations = [
        migrations.AlterField(
            model_name="entry",
            name="kind",
            field=models.CharField(
                choices=[
                    ("task_created", "task created"),
                    ("step_recorded", "step recorded"),
                    ("decision_rejected", "decision rejected"),
                    ("decision_refused", "decision refused"),
                    ("guard_refused", "guard refused"),
                    ("attempt_started", "attempt started"),
                    ("attempt_ended", "attempt ended"),
                    ("lookup", "lookup"),
                    ("webhook_received", "webhook received"),
                    ("step_settled", "step settled"),
                    ("conflict", "conflict"),
                    ("task_waiting", "task waiting"),
                    ("task_resumed", "task resumed"),
                    ("task_flagged", "task needs a human"),
                    ("task_finished", "task finished"),
                    ("task_cancelled", "task cancelled"),
                    ("operator_action", "operator action"),
                    ("approval_requested", "approval requested"),
                    ("approval_decided", "approval decided"),
                    ("saga_unwinding", "saga unwinding"),
                    ("effect_checked", "effect checked"),
                    ("audit_finding", "audit finding"),
                ],
                max_length=30,
            ),
        ),
        migrations.AlterField(
            model_name="task",
            name="attention_code",
            field=models.CharField(
                blank=True,
                choices=[
                    ("conflict", "conflicting reports"),
                    ("key_dead", "key expired"),
                    ("rounds_exhausted", "reconciliation rounds used up"),
                    ("planner_failed", "planner failed"),
                    ("harness_failed", "harness failed"),
                    ("step_limit", "step limit reached"),
                    ("run_failures", "runs keep failing"),
                    ("tool_missing", "tool unavailable"),
                    ("key_misused", "key used with other arguments"),
                    ("compensation_failed", "a compensation did not happen"),
                    ("misconfigured", "our side is misconfigured"),
                    ("effect_lapsed", "an effect lapsed"),
                    ("parked", "parked"),
                    ("audit_finding", "the provider's records disagree"),
                ],
                max_length=30,
            ),
        ),
    ]
