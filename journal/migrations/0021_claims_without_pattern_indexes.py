"""The guards' claims without the indexes nobody reads (issue 19; docs/design.md §6, §14).

``journal_object_live`` and ``journal_object_once`` are keyed by ``guard_key``, a CharField
primary key, so Django gave each a second index beside its primary key: the ``_like`` one
(varchar_pattern_ops) that serves ``LIKE 'prefix%'``. Nothing asks the claims such a
question: the guards and the journal read them by the whole key (the primary key), the
operators' and clients' questions by object go to ``journal_step_by_object``. A once-only
effect writes a row into each at its record, so the two indexes cost every such step two
index insertions and about 150 bytes of WAL (4,270 -> 4,125 a step in the benchmark's path).
0012 meant to drop them already, but found none: Django makes a CharField key's LIKE index
only when the migration that made the table ends, after that migration's own RunSQL. Here
they exist, and every ``_like`` index on the two tables is dropped, whatever its name;
``tests/journal/test_guards.py`` holds each claim table to the index its guard reads. (Django
keeps no state of these indexes: a later AlterField that changed the column's type would
make one again, and the same test would say so.)"""

from __future__ import annotations

from django.db import migrations

PATTERN_INDEXES = (
    ("journal_object_live", "journal_object_live_guard_key_727086ea_like"),
    ("journal_object_once", "journal_object_once_guard_key_b37472a4_like"),
)


DROP_PATTERN_INDEXES = r"""
DO $$
DECLARE
    v_index text;
BEGIN
    FOR v_index IN SELECT indexname FROM pg_indexes
                    WHERE schemaname = current_schema()
                      AND tablename IN ('journal_object_live', 'journal_object_once')
                      AND indexname LIKE '%\_like' LOOP
        EXECUTE format('DROP INDEX %I', v_index);
    END LOOP;
END
$$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("journal", "0020_settle_finish"),
    ]

    operations = [
        migrations.RunSQL(
            DROP_PATTERN_INDEXES,
            reverse_sql=[
                f"CREATE INDEX IF NOT EXISTS {index} ON {table} (guard_key varchar_pattern_ops)"
                for table, index in PATTERN_INDEXES
            ],
        ),
    ]
