"""A task's last settlement and its finish in one commit (issue 19; docs/design.md §14):
``journal_settle_finish`` fences once, settles the step the runner held back and finishes the
task, as ``journal_settle_record`` does for a step's settlement and the next one's record: a
run ends in one statement instead of two. journal_finish's ``p_fenced`` carries the number
the caller's fence took, so its old signature is dropped first."""

from __future__ import annotations

from django.db import migrations

from journal.sqlfiles import loader

DROP_OLD = """
DROP FUNCTION IF EXISTS journal_finish(uuid, bigint, float8, text, boolean, text, jsonb, jsonb,
                                       jsonb);
"""

FILES = (
    ("journal_finish", 3),
    ("journal_settle_finish", 1),
)


class Migration(migrations.Migration):
    dependencies = [
        ("journal", "0019_rules_without_replanning"),
    ]

    operations = [
        migrations.RunSQL(DROP_OLD),
        migrations.RunPython(loader(*FILES)),
    ]
