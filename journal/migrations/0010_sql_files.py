"""The journal's SQL moves into files (journal/sql/, loaded by journal/sqlfiles.py).

Every function and trigger is created (or replaced) from its file: the lease check
(``journal_fence``), the key format (``journal_step_key``), entries (``journal_entry_add``,
``journal_entries_add``), status changes (``journal_transition``), recording a step or a
refusal (``journal_record``), settling (``journal_settle``), finishing (``journal_finish``),
and the rules the triggers hold, including the two that agentops' migration 0003 used to
make on the journal's tables. ``journal_record``, ``journal_settle`` and ``journal_finish``
take new arguments, called by name: their old versions are dropped.
"""

from __future__ import annotations

from django.db import migrations

from journal.sqlfiles import loader

FILES = (
    ("journal_step_key", 1),
    ("journal_fence", 1),
    ("journal_entry_add", 1),
    ("journal_entries_add", 1),
    ("journal_transition", 1),
    ("journal_record", 1),
    ("journal_settle", 1),
    ("journal_finish", 1),
    ("journal_entry_append_only", 1),
    ("journal_step_rules", 1),
    ("journal_step_born", 1),
    ("journal_step_undo_frozen", 1),
    ("journal_step_settled_frozen", 1),
    ("journal_task_transition", 1),
    ("journal_task_saga_rules", 1),
    ("journal_task_facts_frozen", 1),
    ("journal_approval_rules", 1),
)

OLD = r"""
DROP FUNCTION IF EXISTS journal_record(uuid, bigint, float8, boolean, text, jsonb, text, text,
    text, boolean, integer, integer, text, float8, float8, jsonb, text, jsonb);
DROP FUNCTION IF EXISTS journal_settle(bigint, uuid, bigint, float8, text, text, jsonb, jsonb);
DROP FUNCTION IF EXISTS journal_finish(uuid, bigint, text, boolean, text, jsonb, jsonb, jsonb);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("journal", "0009_hardening"),
    ]

    operations = [
        migrations.RunSQL(OLD),
        migrations.RunPython(loader(*FILES)),
    ]
