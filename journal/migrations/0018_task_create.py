"""A task starts in one statement (issue 19: "a task start that costs one round trip"):
``journal_task_create`` inserts the task's row and its first entry, so starting a task is one
round trip and one commit instead of a transaction of two statements (four round trips)."""

from __future__ import annotations

from django.db import migrations

from journal.sqlfiles import loader

FILES = (("journal_task_create", 1),)


class Migration(migrations.Migration):
    dependencies = [
        ("journal", "0017_retention_before"),
    ]

    operations = [
        migrations.RunPython(loader(*FILES)),
    ]
