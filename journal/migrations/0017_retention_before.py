"""The moment the keep lets go before, in one place (docs/design.md §17):
``journal_retention_before()``, now less the owner's keep, which journal_partition_expired
asks and the apps' retention of what they keep beside the journal (a provider's
notifications, resolved audit findings) asks too."""

from __future__ import annotations

from django.db import migrations

from journal.sqlfiles import loader

FILES = (
    ("journal_retention_before", 1),
    ("journal_partition_expired", 2),
)


class Migration(migrations.Migration):
    dependencies = [
        ("journal", "0016_one_fence"),
    ]

    operations = [
        migrations.RunPython(loader(*FILES)),
    ]
