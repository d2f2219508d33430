"""One commit per step (issue 19): journal_settle_record writes the settlement the runner held
back and the next step's record in one statement (journal/sql, docs/design.md §4)."""

from __future__ import annotations

from django.db import migrations

from journal.sqlfiles import loader


class Migration(migrations.Migration):
    dependencies = [
        ("journal", "0012_hot_steps"),
    ]

    operations = [
        migrations.RunPython(loader(("journal_settle_record", 1))),
    ]
