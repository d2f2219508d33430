"""The journal's large tables partitioned by time (issue 19; docs/design.md §17).

Tasks, steps and entries become partitioned by task id — a UUID version 7 from now on
(journal.keys.task_id_new), so by when the task was made — into ranges of
journal_retention.partition_seconds (a week unless set otherwise), listed in
journal_partition and made ahead of time (journal_partitions_ensure). A task and all it
did live in one range, and a range whose tasks are all over and untouched for the
retention's keep is dropped whole (journal_partition_drop): no row is ever deleted. The
once-only claims, what the guards need for good, are a table of their own that no
retention touches.

A partitioned table's unique constraints must name the partition key, and a foreign key
that refers to one makes every drop of a range scan the others for references: so the
three tables have none. What the foreign keys said is checked as a row is born
(journal_step_born: into a task that holds its lease, undoing a step of that task, with a
key of its own task; journal_entry_born: about a task and a step of it); the key is unique
with its task, and since every key names its task, across the journal too. Deletes were
refused before and still are (the frozen-rows triggers); a drop is not a delete.

Rows made before (random ids) are copied into each table's default partition, where they
stay; nothing of them changes.
"""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models

import journal.keys
from journal.sqlfiles import loader

REBUILD = r"""
CREATE TABLE journal_task_partitioned (LIKE journal_task INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (id);
CREATE TABLE journal_step_partitioned (LIKE journal_step INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (task_id);
CREATE TABLE journal_entry_partitioned (LIKE journal_entry INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (task_id);
CREATE TABLE journal_task_default PARTITION OF journal_task_partitioned DEFAULT
    WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.05);
CREATE TABLE journal_step_default PARTITION OF journal_step_partitioned DEFAULT
    WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.05);
CREATE TABLE journal_entry_default PARTITION OF journal_entry_partitioned DEFAULT
    WITH (autovacuum_vacuum_insert_scale_factor = 0.05);
-- Identity columns move to plain sequences (a partitioned table has them only from
-- PostgreSQL 17 on), owned by the column as before, so pg_get_serial_sequence finds them.
CREATE SEQUENCE journal_step_id_partitioned;
CREATE SEQUENCE journal_entry_id_partitioned;
SELECT setval('journal_step_id_partitioned', COALESCE((SELECT max(id) FROM journal_step), 0) + 1, false);
SELECT setval('journal_entry_id_partitioned', COALESCE((SELECT max(id) FROM journal_entry), 0) + 1, false);
ALTER TABLE journal_step_partitioned ALTER COLUMN id SET DEFAULT nextval('journal_step_id_partitioned');
ALTER TABLE journal_entry_partitioned ALTER COLUMN id SET DEFAULT nextval('journal_entry_id_partitioned');
INSERT INTO journal_task_partitioned SELECT * FROM journal_task;
INSERT INTO journal_step_partitioned SELECT * FROM journal_step;
INSERT INTO journal_entry_partitioned SELECT * FROM journal_entry;
DROP TABLE journal_entry, journal_step, journal_task;
ALTER TABLE journal_task_partitioned RENAME TO journal_task;
ALTER TABLE journal_step_partitioned RENAME TO journal_step;
ALTER TABLE journal_entry_partitioned RENAME TO journal_entry;
ALTER SEQUENCE journal_step_id_partitioned RENAME TO journal_step_id_seq;
ALTER SEQUENCE journal_entry_id_partitioned RENAME TO journal_entry_id_seq;
ALTER SEQUENCE journal_step_id_seq OWNED BY journal_step.id;
ALTER SEQUENCE journal_entry_id_seq OWNED BY journal_entry.id;
-- Each table's keys and indexes, as journal.models names them; the primary keys of steps and
-- entries name their task, which partitions them (an id alone still finds its row).
ALTER TABLE journal_task ADD CONSTRAINT journal_task_pkey PRIMARY KEY (id);
CREATE INDEX journal_task_advancing ON journal_task (status, wake_at)
    WHERE status IN ('runnable', 'waiting');
CREATE INDEX journal_task_newest ON journal_task (created_at DESC);
CREATE INDEX journal_task_status_newest ON journal_task (status, created_at DESC);
ALTER TABLE journal_step ADD CONSTRAINT journal_step_pkey PRIMARY KEY (id, task_id);
ALTER TABLE journal_step ADD CONSTRAINT journal_step_task_n_unique UNIQUE (task_id, n);
ALTER TABLE journal_step ADD CONSTRAINT journal_step_key_unique UNIQUE (key, task_id);
CREATE INDEX journal_step_due_for_lookup ON journal_step (next_check_at)
    WHERE next_check_at IS NOT NULL;
CREATE INDEX journal_step_state_ranges ON journal_step USING brin (state);
CREATE INDEX journal_step_by_object ON journal_step (guard_key) WHERE guard_key IS NOT NULL;
ALTER TABLE journal_entry ADD CONSTRAINT journal_entry_pkey PRIMARY KEY (id, task_id);
CREATE INDEX journal_entry_task_id ON journal_entry (task_id, id);
INSERT INTO journal_retention (id, partition_seconds, ahead, keep_seconds)
VALUES (1, 7 * 86400, 4, 90 * 86400);
"""

# The rules on the rebuilt tables (their triggers went with the old ones), the rules of a
# step's and an entry's birth that replace the foreign keys, approvals deleted only with
# their task, and the partitions' own functions.
FILES = (
    ("journal_uuid_at", 1),
    ("journal_step_born", 2),
    ("journal_entry_born", 1),
    ("journal_step_claims", 1),
    ("journal_step_rules", 1),
    ("journal_step_settled_frozen", 1),
    ("journal_step_undo_frozen", 1),
    ("journal_task_facts_frozen", 1),
    ("journal_task_saga_rules", 1),
    ("journal_task_transition", 1),
    ("journal_entry_append_only", 1),
    ("journal_approval_rules", 2),
    ("journal_partitions_make", 1),
    ("journal_partitions_ensure", 1),
    ("journal_partition_expired", 1),
    ("journal_partition_drop", 1),
    ("journal_partition_dropped", 1),
)


class Migration(migrations.Migration):
    dependencies = [
        ("journal", "0014_named_arguments"),
    ]

    operations = [
        migrations.CreateModel(
            name="Partition",
            fields=[
                ("name", models.CharField(max_length=40, primary_key=True, serialize=False)),
                ("starts", models.DateTimeField()),
                ("ends", models.DateTimeField()),
                (
                    "made_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                ("dropped_at", models.DateTimeField(blank=True, null=True)),
                (
                    "tasks",
                    models.BigIntegerField(
                        blank=True, help_text="How many it held, dropped.", null=True
                    ),
                ),
            ],
            options={
                "db_table": "journal_partition",
                "ordering": ["starts"],
            },
        ),
        migrations.CreateModel(
            name="Retention",
            fields=[
                (
                    "id",
                    models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False),
                ),
                ("partition_seconds", models.FloatField()),
                (
                    "ahead",
                    models.PositiveSmallIntegerField(help_text="How many ranges are made ahead."),
                ),
                (
                    "keep_seconds",
                    models.FloatField(
                        blank=True,
                        help_text="Kept this long after a range is over; null: for good.",
                        null=True,
                    ),
                ),
            ],
            options={
                "db_table": "journal_retention",
            },
        ),
        migrations.AlterField(
            model_name="approval",
            name="task",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="approvals",
                to="journal.task",
            ),
        ),
        migrations.AlterField(
            model_name="approval",
            name="used_by",
            field=models.OneToOneField(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="approval",
                to="journal.step",
            ),
        ),
        migrations.AlterField(
            model_name="entry",
            name="step",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="entries",
                to="journal.step",
            ),
        ),
        migrations.AlterField(
            model_name="entry",
            name="task",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="entries",
                to="journal.task",
            ),
        ),
        migrations.AlterField(
            model_name="step",
            name="key",
            field=models.CharField(max_length=255),
        ),
        migrations.AlterField(
            model_name="step",
            name="offset_by",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                help_text="The done step that undid this one.",
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="journal.step",
            ),
        ),
        migrations.AlterField(
            model_name="step",
            name="offsets",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                help_text="The step of this task that this one undoes (a refund, release, cancel).",
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="undos",
                to="journal.step",
            ),
        ),
        migrations.AlterField(
            model_name="step",
            name="task",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="steps",
                to="journal.task",
            ),
        ),
        migrations.AlterField(
            model_name="task",
            name="id",
            field=models.UUIDField(
                default=journal.keys.task_id_new, editable=False, primary_key=True, serialize=False
            ),
        ),
        migrations.AddConstraint(
            model_name="step",
            constraint=models.UniqueConstraint(
                fields=("key", "task"), name="journal_step_key_unique"
            ),
        ),
        migrations.RunSQL(REBUILD),
        # The ranges themselves are made after every migrate, once the settings' width is
        # written (agentops.apps; journal.retention.partitions_ensure).
        migrations.RunPython(loader(*FILES)),
    ]
