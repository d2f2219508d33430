"""A step's rules at a fraction of their cost (issue 19; docs/design.md §14): PostgreSQL reads
and plans a CHECK constraint, and a trigger's WHEN clause, again at every statement that
writes the row, and a step wrote its two tables five times. The CHECK constraints of the task
and the step move into their triggers, whose expressions are planned once a session
(journal_task_rules, journal_step_born, journal_step_moves: the same rules, raised with the
same names); the claims and the entry's birth rule lose their WHEN clauses and are taken
before the row is written, a once-only effect's two claims in one statement; the rules no
write of the hot path can break are asked only of the writes that could (UPDATE OF: a step's
frozen identity, apart now from how it moves; a task's facts, a saga's plan); the combined
write tells the settlement and the record what its fence took instead of having them read
the task's row again. journal_settle's and journal_record's ``p_fenced`` carry those values,
so their old signatures are dropped first."""

from __future__ import annotations

from django.db import migrations

import journal.models
from journal.sqlfiles import loader

DROP_OLD = """
DROP FUNCTION IF EXISTS journal_settle(bigint, text, text, jsonb, jsonb, text, uuid, bigint,
                                       float8, integer, text, jsonb, boolean);
DROP FUNCTION IF EXISTS journal_record(uuid, bigint, float8, text, jsonb, jsonb, jsonb, boolean,
                                       text, text, text, boolean, integer, integer, text, float8,
                                       float8, text, text, text, jsonb, text, boolean);
"""

FILES = (
    ("journal_task_rules", 1),
    ("journal_task_facts_frozen", 2),
    ("journal_task_saga_rules", 2),
    ("journal_step_born", 3),
    ("journal_step_rules", 2),
    ("journal_step_moves", 1),
    ("journal_step_undo_frozen", 2),
    ("journal_step_claims", 2),
    ("journal_entry_born", 2),
    ("journal_settle", 4),
    ("journal_record", 4),
    ("journal_settle_record", 4),
)


class Migration(migrations.Migration):
    dependencies = [
        ("journal", "0018_task_create"),
    ]

    operations = [
        migrations.RunSQL(DROP_OLD),
        migrations.RunPython(loader(*FILES)),
        migrations.RemoveConstraint(model_name="step", name="journal_step_state_valid"),
        migrations.RemoveConstraint(model_name="step", name="journal_step_settled_at_iff_settled"),
        migrations.RemoveConstraint(model_name="task", name="journal_task_waiting_has_wake_at"),
        migrations.RemoveConstraint(model_name="task", name="journal_task_attention_has_code"),
        migrations.RemoveConstraint(model_name="task", name="journal_task_status_valid"),
        migrations.AlterField(
            model_name="step", name="attempts", field=journal.models.CountField(default=0)
        ),
        migrations.AlterField(
            model_name="step", name="lookups", field=journal.models.CountField(default=0)
        ),
        migrations.AlterField(model_name="step", name="n", field=journal.models.CountField()),
        migrations.AlterField(
            model_name="step",
            name="retries",
            field=journal.models.CountField(
                default=0, help_text="How many harness retries of a transient not-done came before."
            ),
        ),
        migrations.AlterField(
            model_name="task", name="failed_runs", field=journal.models.CountField(default=0)
        ),
        migrations.AlterField(
            model_name="task", name="step_count", field=journal.models.CountField(default=0)
        ),
    ]
