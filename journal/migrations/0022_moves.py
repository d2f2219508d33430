"""The journal's API is its functions (issue 35; docs/design.md §4): every write is one of
them, each checking its own preconditions and writing its entry in the same statement, and
the app's roles write no journal table (agentops/dbroles.py takes their INSERT, UPDATE and
DELETE away after this migration). So the triggers that re-checked every write are retired
(their files' newest versions drop them); only the guards' claims (journal_step_claims),
which the claims' primary keys enforce, stay a trigger.

- ``Task.ended_as``: how a task ended, kept when a later report hands it to a person:
  finished means finished, and journal_transition never runs such a task again. Filled in
  for the tasks that ended before, from their status or, for one in front of a person now,
  from the entry that ended it.
- ``journal_status`` and ``journal_status_move``: the state machine, written from
  journal/status.py (one declaration), read by journal_transition.
- The moves: the lease (take, renew, release), record, settle, finish, an attempt, an
  unknown step, each status move of a runner (wait, wake, flag, await), a saga's (unwind,
  approval asked, expired, spent, an effect checked), each person's decision (resume,
  cancel, approve, reject, compensate, reconcile now, resolve, correct), a note, a task's
  creation, a provider's report that does not fit, an audit's finding. The settlement a
  runner held back travels as any lease move's ``p_settles`` (journal_hold), so
  journal_settle_record and journal_settle_finish are retired.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

from journal.sqlfiles import loader

RETIRED = (
    ("journal_approval_rules", 3),
    ("journal_entry_born", 3),
    ("journal_entry_append_only", 2),
    ("journal_step_born", 4),
    ("journal_step_rules", 3),
    ("journal_step_moves", 2),
    ("journal_step_settled_frozen", 2),
    ("journal_step_undo_frozen", 3),
    ("journal_task_facts_frozen", 3),
    ("journal_task_rules", 2),
    ("journal_task_saga_rules", 3),
    ("journal_task_transition", 2),
    ("journal_fence", 2),
    ("journal_settle_record", 5),
    ("journal_settle_finish", 2),
    ("journal_entries_add", 3),
)

# Functions whose signature or result changed: CREATE OR REPLACE cannot change those, so
# every signature of them goes first.
CHANGED = (
    "journal_transition",
    "journal_record",
    "journal_settle",
    "journal_finish",
    "journal_task_create",
)
DROP_CHANGED = f"""
DO $$
DECLARE
    v_fn regprocedure;
BEGIN
    FOR v_fn IN SELECT p.oid::regprocedure FROM pg_proc p
                  JOIN pg_namespace n ON n.oid = p.pronamespace
                 WHERE n.nspname = current_schema()
                   AND p.proname IN ({", ".join(f"'{name}'" for name in CHANGED)}) LOOP
        EXECUTE format('DROP FUNCTION %s', v_fn);
    END LOOP;
END
$$;
"""  # noqa: S608 - the names are our own functions'

ENDED = """
UPDATE journal_task t SET ended_as = t.status
 WHERE t.status IN ('finished', 'cancelled', 'compensated');
UPDATE journal_task t
   SET ended_as = (SELECT e.data->>'to' FROM journal_entry e
                    WHERE e.task_id = t.id AND e.kind IN ('task_finished', 'task_cancelled')
                    ORDER BY e.id DESC LIMIT 1)
 WHERE t.status = 'needs_human' AND EXISTS (
       SELECT 1 FROM journal_entry e
        WHERE e.task_id = t.id AND e.kind IN ('task_finished', 'task_cancelled'));
"""

FILES = (
    ("journal_transition", 3),
    ("journal_lease_take", 1),
    ("journal_lease_renew", 1),
    ("journal_lease_release", 1),
    ("journal_hold", 1),
    ("journal_step_notes", 1),
    ("journal_step_conflicted", 1),
    ("journal_step_settle", 1),
    ("journal_settle", 5),
    ("journal_record", 5),
    ("journal_finish", 4),
    ("journal_attempt_start", 1),
    ("journal_mark_unknown", 1),
    ("journal_task_wait", 1),
    ("journal_task_wake", 1),
    ("journal_task_flag", 1),
    ("journal_task_await", 1),
    ("journal_approval_expired", 1),
    ("journal_approval_request", 1),
    ("journal_approval_expire", 1),
    ("journal_approval_spend", 1),
    ("journal_saga_unwound", 1),
    ("journal_saga_unwind", 1),
    ("journal_effect_checked", 1),
    ("journal_person_reason", 1),
    ("journal_task_cancel_refusal", 1),
    ("journal_saga_compensate_refusal", 1),
    ("journal_step_correct_refusal", 1),
    ("journal_task_resume", 1),
    ("journal_task_cancel", 1),
    ("journal_approval_awaiting", 1),
    ("journal_approval_approve", 1),
    ("journal_approval_reject", 1),
    ("journal_saga_compensate", 1),
    ("journal_steps_reconcile_now", 1),
    ("journal_step_resolve", 1),
    ("journal_step_correct", 1),
    ("journal_note", 1),
    ("journal_task_create", 2),
    ("journal_step_conflict", 1),
    ("journal_step_noted", 1),
    ("journal_step_audited", 1),
)


def status_machine(apps: Any, schema_editor: Any) -> None:
    from journal.status import status_machine_sync

    status_machine_sync(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("journal", "0021_claims_without_pattern_indexes"),
    ]

    operations = [
        migrations.RunPython(loader(*RETIRED)),
        migrations.AddField(
            model_name="task",
            name="ended_as",
            field=models.CharField(
                blank=True,
                choices=[
                    ("runnable", "runnable"),
                    ("waiting", "waiting"),
                    ("awaiting_approval", "awaiting approval"),
                    ("needs_human", "needs a human"),
                    ("finished", "finished"),
                    ("cancelled", "cancelled"),
                    ("compensated", "compensated"),
                ],
                db_default="",
                default="",
                max_length=20,
            ),
        ),
        migrations.RunSQL(ENDED, reverse_sql=migrations.RunSQL.noop),
        migrations.CreateModel(
            name="Status",
            fields=[
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("runnable", "runnable"),
                            ("waiting", "waiting"),
                            ("awaiting_approval", "awaiting approval"),
                            ("needs_human", "needs a human"),
                            ("finished", "finished"),
                            ("cancelled", "cancelled"),
                            ("compensated", "compensated"),
                        ],
                        max_length=20,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("label", models.CharField(max_length=50)),
                ("final", models.BooleanField()),
            ],
            options={"db_table": "journal_status"},
        ),
        migrations.CreateModel(
            name="StatusMove",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "from_status",
                    models.CharField(
                        choices=[
                            ("runnable", "runnable"),
                            ("waiting", "waiting"),
                            ("awaiting_approval", "awaiting approval"),
                            ("needs_human", "needs a human"),
                            ("finished", "finished"),
                            ("cancelled", "cancelled"),
                            ("compensated", "compensated"),
                        ],
                        max_length=20,
                    ),
                ),
                (
                    "to_status",
                    models.CharField(
                        choices=[
                            ("runnable", "runnable"),
                            ("waiting", "waiting"),
                            ("awaiting_approval", "awaiting approval"),
                            ("needs_human", "needs a human"),
                            ("finished", "finished"),
                            ("cancelled", "cancelled"),
                            ("compensated", "compensated"),
                        ],
                        max_length=20,
                    ),
                ),
            ],
            options={
                "db_table": "journal_status_move",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("from_status", "to_status"), name="journal_status_move_unique"
                    )
                ],
            },
        ),
        migrations.RunPython(status_machine, migrations.RunPython.noop),
        migrations.RunSQL(DROP_CHANGED),
        migrations.RunPython(loader(*FILES)),
    ]
