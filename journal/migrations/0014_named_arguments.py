"""SQL calls SQL by name (issue 16): journal_settle_record calls journal_settle and
journal_record, and every function calls journal_fence, journal_entry_add,
journal_entries_add, journal_transition and journal_step_key, with named arguments
(``p_x => ...``) only, as Python does, so that a function whose arguments are reordered or
added to cannot be called with a value in the wrong place. The signatures do not change:
each function is replaced by its next version (journal/sql)."""

from __future__ import annotations

from django.db import migrations

from journal.sqlfiles import loader

FILES = (
    ("journal_entries_add", 2),
    ("journal_transition", 2),
    ("journal_record", 2),
    ("journal_settle", 2),
    ("journal_finish", 2),
    ("journal_settle_record", 2),
)


class Migration(migrations.Migration):
    dependencies = [
        ("journal", "0013_one_commit_per_step"),
    ]

    operations = [
        migrations.RunPython(loader(*FILES)),
    ]
