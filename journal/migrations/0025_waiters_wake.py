"""Tasks waiting on another task's effect wake as soon as it settles (issue 38; docs/design.md
§7): ``journal_waiters_wake(p_key, p_actor)``, a worker's move, makes runnable the waiting tasks
whose last step the guard refused for that step, once it is no longer open — when a person's
decision settled it, or a lookup a person asked for — instead of at their backed-off time."""

from __future__ import annotations

from django.db import migrations

from journal.sqlfiles import loader

FILES = (("journal_waiters_wake", 1),)


class Migration(migrations.Migration):
    dependencies = [
        ("journal", "0024_what_moves_return"),
    ]

    operations = [
        migrations.RunPython(loader(*FILES)),
    ]
