"""A step's settlement becomes a HOT update (issue 19): no index of journal_step names a
column that settling changes.

The guards were partial unique indexes on journal_step naming its state, so every
settlement wrote a new entry in every index of the table. They become claims in three small
tables of their own (journal_object_live, journal_object_once, journal_step_undo), kept by
the trigger ``journal_step_claims`` (journal/sql) and carrying the guards' names, so a
second effect is refused exactly as before. The once-only claims keep the step's key, tool
and evidence: the memory of which objects have a standing effect, apart from the steps.
Lookups are found by ``next_check_at`` alone (only unknown steps have one). journal_step
leaves room on its pages for a settled row beside the recorded one (fillfactor 70).
"""

import django.contrib.postgres.indexes
import django.db.models.deletion
from django.db import migrations, models

from journal.models import GUARD_CONSTRAINT, ONCE_CONSTRAINT, UNDO_CONSTRAINT
from journal.sqlfiles import loader

CLAIMS = r"""
ALTER TABLE journal_object_live RENAME CONSTRAINT journal_object_live_pkey TO journal_step_one_live_effect_per_object;
ALTER TABLE journal_object_once RENAME CONSTRAINT journal_object_once_pkey TO journal_step_once_per_object;
ALTER TABLE journal_step_undo RENAME CONSTRAINT journal_step_undo_pkey TO journal_step_one_undo_per_step;
DO $$
DECLARE
    v_index text;
BEGIN
    -- Django's second index on a text primary key (for LIKE): the guards never need it.
    FOR v_index IN SELECT indexname FROM pg_indexes
                    WHERE tablename IN ('journal_object_live', 'journal_object_once')
                      AND indexname LIKE '%\_like' LOOP
        EXECUTE format('DROP INDEX %I', v_index);
    END LOOP;
END
$$;
INSERT INTO journal_object_live (guard_key, step_id)
SELECT guard_key, id FROM journal_step
 WHERE guard_key IS NOT NULL AND state IN ('pending', 'unknown');
INSERT INTO journal_object_once (guard_key, step_id, task_id, key, tool, evidence, settled_at)
SELECT guard_key, id, task_id, key, tool, COALESCE(outcome -> 'evidence', '{}'::jsonb), settled_at
  FROM journal_step
 WHERE guard_key IS NOT NULL AND once AND offset_by_id IS NULL
   AND state IN ('pending', 'unknown', 'done');
INSERT INTO journal_step_undo (offsets_id, step_id)
SELECT offsets_id, id FROM journal_step
 WHERE offsets_id IS NOT NULL AND state IN ('pending', 'unknown', 'done');
ALTER TABLE journal_step SET (fillfactor = 70);
"""
# The claims carry the guards' names, as journal.record catches them.
if not all(f" TO {n};" in CLAIMS for n in (GUARD_CONSTRAINT, ONCE_CONSTRAINT, UNDO_CONSTRAINT)):
    raise RuntimeError("migration 0012 names the guards otherwise than journal.models")


class Migration(migrations.Migration):
    dependencies = [
        ("journal", "0011_audit_finding"),
    ]

    operations = [
        migrations.CreateModel(
            name="ObjectLive",
            fields=[
                ("guard_key", models.CharField(max_length=255, primary_key=True, serialize=False)),
            ],
            options={
                "db_table": "journal_object_live",
            },
        ),
        migrations.CreateModel(
            name="ObjectOnce",
            fields=[
                ("guard_key", models.CharField(max_length=255, primary_key=True, serialize=False)),
                ("task_id", models.UUIDField()),
                ("key", models.CharField(max_length=255)),
                ("tool", models.CharField(max_length=100)),
                ("evidence", models.JSONField(blank=True, default=dict)),
                ("settled_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "db_table": "journal_object_once",
            },
        ),
        migrations.CreateModel(
            name="StepUndo",
            fields=[
                (
                    "offsets",
                    models.OneToOneField(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        primary_key=True,
                        related_name="+",
                        serialize=False,
                        to="journal.step",
                    ),
                ),
            ],
            options={
                "db_table": "journal_step_undo",
            },
        ),
        migrations.RemoveConstraint(
            model_name="step",
            name="journal_step_one_undo_per_step",
        ),
        migrations.RemoveConstraint(
            model_name="step",
            name="journal_step_one_live_effect_per_object",
        ),
        migrations.RemoveConstraint(
            model_name="step",
            name="journal_step_once_per_object",
        ),
        migrations.RemoveIndex(
            model_name="step",
            name="journal_step_due_for_lookup",
        ),
        migrations.AddIndex(
            model_name="step",
            index=models.Index(
                condition=models.Q(("next_check_at__isnull", False)),
                fields=["next_check_at"],
                name="journal_step_due_for_lookup",
            ),
        ),
        migrations.AddIndex(
            model_name="step",
            index=models.Index(
                condition=models.Q(("guard_key__isnull", False)),
                fields=["guard_key"],
                name="journal_step_by_object",
            ),
        ),
        migrations.AddField(
            model_name="objectlive",
            name="step",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="journal.step",
            ),
        ),
        migrations.AddField(
            model_name="objectonce",
            name="step",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="journal.step",
            ),
        ),
        migrations.AddField(
            model_name="stepundo",
            name="step",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="journal.step",
            ),
        ),
        migrations.AddIndex(
            model_name="step",
            index=django.contrib.postgres.indexes.BrinIndex(
                fields=["state"], name="journal_step_state_ranges"
            ),
        ),
        migrations.RunSQL(CLAIMS),
        migrations.RunPython(loader(("journal_step_claims", 1))),
    ]
