"""One fence a step (issue 19): journal_settle_record fences the lease once, numbering the
step it records, and journal_settle and journal_record, told so (``p_fenced``), check the
token again instead of fencing a second time: one update of the task's row a step, not two.
Their signatures gain that argument, so the old ones are dropped first (a function with
other arguments is another function to PostgreSQL)."""

from __future__ import annotations

from django.db import migrations

from journal.sqlfiles import loader

DROP_OLD = """
DROP FUNCTION IF EXISTS journal_settle(bigint, text, text, jsonb, jsonb, text, uuid, bigint,
                                       float8, integer, text, jsonb);
DROP FUNCTION IF EXISTS journal_record(uuid, bigint, float8, text, jsonb, jsonb, jsonb, boolean,
                                       text, text, text, boolean, integer, integer, text, float8,
                                       float8, text, text, text, jsonb, text);
"""

FILES = (
    ("journal_settle", 3),
    ("journal_record", 3),
    ("journal_settle_record", 3),
)


class Migration(migrations.Migration):
    dependencies = [
        ("journal", "0015_partitions"),
    ]

    operations = [
        migrations.RunSQL(DROP_OLD),
        migrations.RunPython(loader(*FILES)),
    ]
