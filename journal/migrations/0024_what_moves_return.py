"""What a run committed is told by the moves it made, as they return it, not read back from
the journal after (issue 35, docs/design.md §14): journal_lease_release says what became of
the settlement it carried, and journal_mark_unknown whether the step is unknown for the first
time. Both results changed, so their old signatures go first."""

from __future__ import annotations

from django.db import migrations

from journal.sqlfiles import loader

DROP_CHANGED = """
DROP FUNCTION IF EXISTS journal_lease_release(uuid, bigint, boolean, jsonb);
DROP FUNCTION IF EXISTS journal_mark_unknown(uuid, bigint, float8, bigint, text, jsonb, float8,
                                             text, text, boolean, jsonb, jsonb);
"""

FILES = (
    ("journal_lease_release", 2),
    ("journal_mark_unknown", 2),
)


class Migration(migrations.Migration):
    dependencies = [
        ("journal", "0023_person_decisions"),
    ]

    operations = [
        migrations.RunSQL(DROP_CHANGED),
        migrations.RunPython(loader(*FILES)),
    ]
