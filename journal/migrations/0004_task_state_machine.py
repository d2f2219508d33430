"""The task's state machine, attention codes, wake-up times, once-per-object effects, undos
linked to what they undo, and reconciliation deadlines frozen on each step.

Data: ``running`` becomes ``runnable`` (a task no worker holds is not running); waiting
tasks get the wake-up time of their unknown step; flagged tasks get an attention code
read from their sentence; recorded steps get the key deadlines their tools declared
(Stripe's 24 h, the only lifetime in use so far). Steps recorded before this migration are
not marked once-only: earlier data may already hold a second effect on one object, which the
new unique index would refuse.

Rules (SQL below): a task's status moves only along journal.status.TRANSITIONS; a step's
object, once-flag, undo link, retry count, refusal, cost and key deadlines are frozen with
its identity, and ``offset_by`` may only be set once, from nothing, on a done step.
"""

import django.db.models.deletion
import django.db.models.functions.text
from django.db import migrations, models

DATA = r"""
UPDATE journal_task SET status = 'runnable' WHERE status = 'running';
UPDATE journal_task t
   SET wake_at = COALESCE(
       (SELECT min(s.next_check_at) FROM journal_step s
         WHERE s.task_id = t.id AND s.state = 'unknown'), now())
 WHERE t.status = 'waiting';
UPDATE journal_task
   SET attention_code = CASE
       WHEN attention LIKE 'the planner failed%' THEN 'planner_failed'
       WHEN attention LIKE '%steps without finishing%' THEN 'step_limit'
       WHEN attention LIKE '%no longer remembers its key%' THEN 'key_dead'
       WHEN attention LIKE '%reconciliation rounds%' THEN 'rounds_exhausted'
       WHEN attention LIKE '%is settled%but%reports%' THEN 'conflict'
       WHEN attention LIKE '%not available to look it up%' THEN 'tool_missing'
       ELSE 'parked' END
 WHERE status = 'needs_human';
UPDATE journal_step
   SET key_trusted_until = first_started_at + interval '21 hours 36 minutes',
       lookup_until = first_started_at + interval '24 hours 1 minute'
 WHERE kind = 'call' AND first_started_at IS NOT NULL;
UPDATE journal_step
   SET refusal = CASE
       WHEN outcome ? 'refused_by' THEN 'in_flight'
       WHEN detail LIKE 'unknown tool%' THEN 'unknown_tool'
       WHEN detail LIKE 'invalid arguments%' THEN 'invalid_arguments'
       WHEN detail LIKE 'amount:%exceeds%' THEN 'limit'
       ELSE '' END
 WHERE state = 'not_done' AND attempts = 0 AND kind = 'call';
"""

RULES = r"""
CREATE FUNCTION journal_task_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status IS DISTINCT FROM OLD.status AND (OLD.status, NEW.status) NOT IN (
        ('runnable', 'waiting'), ('runnable', 'needs_human'), ('runnable', 'finished'),
        ('waiting', 'runnable'), ('waiting', 'needs_human'),
        ('needs_human', 'runnable'), ('needs_human', 'finished'),
        ('needs_human', 'cancelled'),
        ('finished', 'needs_human'), ('cancelled', 'needs_human')
    ) THEN
        RAISE EXCEPTION 'task %: % -> % is not a transition of its state machine',
            OLD.id, OLD.status, NEW.status
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER journal_task_state_machine
    BEFORE UPDATE OF status ON journal_task
    FOR EACH ROW EXECUTE FUNCTION journal_task_transition();

CREATE OR REPLACE FUNCTION journal_step_rules() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'journal steps are never deleted (step %)', OLD.key
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.key IS DISTINCT FROM OLD.key OR NEW.args IS DISTINCT FROM OLD.args
       OR NEW.tool IS DISTINCT FROM OLD.tool OR NEW.task_id IS DISTINCT FROM OLD.task_id
       OR NEW.n IS DISTINCT FROM OLD.n OR NEW.kind IS DISTINCT FROM OLD.kind
       OR NEW.guard IS DISTINCT FROM OLD.guard OR NEW.once IS DISTINCT FROM OLD.once
       OR NEW.offsets_id IS DISTINCT FROM OLD.offsets_id
       OR NEW.retries IS DISTINCT FROM OLD.retries
       OR NEW.refusal IS DISTINCT FROM OLD.refusal OR NEW.cost IS DISTINCT FROM OLD.cost
       OR NEW.first_started_at IS DISTINCT FROM OLD.first_started_at
       OR NEW.key_trusted_until IS DISTINCT FROM OLD.key_trusted_until
       OR NEW.lookup_until IS DISTINCT FROM OLD.lookup_until THEN
        RAISE EXCEPTION 'step % is frozen: its key, tool, arguments, object and deadlines', OLD.key
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF OLD.state IN ('done', 'not_done') AND NEW.state IS DISTINCT FROM OLD.state THEN
        RAISE EXCEPTION 'step % is settled % and never moves (to %)', OLD.key, OLD.state, NEW.state
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.offset_by_id IS DISTINCT FROM OLD.offset_by_id
       AND (OLD.offset_by_id IS NOT NULL OR NEW.state <> 'done') THEN
        RAISE EXCEPTION 'step %: only a done step is undone, and only once', OLD.key
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;
"""

UNRULES = r"""
DROP TRIGGER journal_task_state_machine ON journal_task;
DROP FUNCTION journal_task_transition();
CREATE OR REPLACE FUNCTION journal_step_rules() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'journal steps are never deleted (step %)', OLD.key
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.key IS DISTINCT FROM OLD.key OR NEW.args IS DISTINCT FROM OLD.args
       OR NEW.tool IS DISTINCT FROM OLD.tool OR NEW.task_id IS DISTINCT FROM OLD.task_id
       OR NEW.n IS DISTINCT FROM OLD.n OR NEW.kind IS DISTINCT FROM OLD.kind
       OR NEW.guard IS DISTINCT FROM OLD.guard THEN
        RAISE EXCEPTION 'step % is frozen: its key, tool and arguments never change', OLD.key
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF OLD.state IN ('done', 'not_done') AND NEW.state IS DISTINCT FROM OLD.state THEN
        RAISE EXCEPTION 'step % is settled % and never moves (to %)', OLD.key, OLD.state, NEW.state
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("journal", "0003_alter_entry_kind"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="task",
            name="journal_task_status_valid",
        ),
        migrations.RemoveIndex(
            model_name="task",
            name="journal_task_runnable",
        ),
        migrations.RemoveConstraint(
            model_name="step",
            name="journal_step_one_live_effect_per_object",
        ),
        migrations.AddConstraint(
            model_name="step",
            constraint=models.UniqueConstraint(
                django.db.models.functions.text.Lower("guard"),
                condition=models.Q(("guard__isnull", False), ("state__in", ("pending", "unknown"))),
                name="journal_step_one_live_effect_per_object",
            ),
        ),
        migrations.AddField(
            model_name="step",
            name="key_trusted_until",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="step",
            name="lookup_until",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="step",
            name="offset_by",
            field=models.ForeignKey(
                blank=True,
                help_text="The done step that undid this one.",
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="journal.step",
            ),
        ),
        migrations.AddField(
            model_name="step",
            name="offsets",
            field=models.ForeignKey(
                blank=True,
                help_text="The step of this task that this one undoes (a refund, release, cancel).",
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="undos",
                to="journal.step",
            ),
        ),
        migrations.AddField(
            model_name="step",
            name="once",
            field=models.BooleanField(
                default=False, help_text="The effect happens once per object (unless offset)."
            ),
        ),
        migrations.AddField(
            model_name="step",
            name="refusal",
            field=models.CharField(
                blank=True,
                help_text="Why it was refused without running, as a code.",
                max_length=30,
            ),
        ),
        migrations.AddField(
            model_name="step",
            name="retries",
            field=models.PositiveIntegerField(
                default=0, help_text="How many harness retries of a transient not-done came before."
            ),
        ),
        migrations.AddField(
            model_name="task",
            name="attention_code",
            field=models.CharField(
                blank=True,
                choices=[
                    ("conflict", "conflicting reports"),
                    ("key_dead", "key expired"),
                    ("rounds_exhausted", "reconciliation rounds used up"),
                    ("planner_failed", "planner failed"),
                    ("harness_failed", "harness failed"),
                    ("step_limit", "step limit reached"),
                    ("run_failures", "runs keep failing"),
                    ("tool_missing", "tool unavailable"),
                    ("key_misused", "key used with other arguments"),
                    ("parked", "parked"),
                ],
                max_length=30,
            ),
        ),
        migrations.AddField(
            model_name="task",
            name="failed_runs",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="task",
            name="wake_at",
            field=models.DateTimeField(
                blank=True, help_text="When a waiting task may advance again.", null=True
            ),
        ),
        migrations.RunSQL(DATA, migrations.RunSQL.noop),
        migrations.AlterField(
            model_name="entry",
            name="kind",
            field=models.CharField(
                choices=[
                    ("task_created", "task created"),
                    ("step_recorded", "step recorded"),
                    ("decision_rejected", "decision rejected"),
                    ("decision_refused", "decision refused"),
                    ("guard_refused", "guard refused"),
                    ("attempt_started", "attempt started"),
                    ("attempt_ended", "attempt ended"),
                    ("lookup", "lookup"),
                    ("webhook_received", "webhook received"),
                    ("step_settled", "step settled"),
                    ("conflict", "conflict"),
                    ("task_waiting", "task waiting"),
                    ("task_resumed", "task resumed"),
                    ("task_flagged", "task needs a human"),
                    ("task_finished", "task finished"),
                    ("task_cancelled", "task cancelled"),
                    ("operator_action", "operator action"),
                ],
                max_length=30,
            ),
        ),
        migrations.AlterField(
            model_name="task",
            name="status",
            field=models.CharField(
                choices=[
                    ("runnable", "runnable"),
                    ("waiting", "waiting"),
                    ("needs_human", "needs a human"),
                    ("finished", "finished"),
                    ("cancelled", "cancelled"),
                ],
                default="runnable",
                max_length=20,
            ),
        ),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(
                condition=models.Q(("status__in", ["runnable", "waiting"])),
                fields=["status", "wake_at"],
                name="journal_task_advancing",
            ),
        ),
        migrations.AddConstraint(
            model_name="step",
            constraint=models.UniqueConstraint(
                django.db.models.functions.text.Lower("guard"),
                condition=models.Q(
                    ("guard__isnull", False),
                    ("offset_by__isnull", True),
                    ("once", True),
                    ("state__in", ("pending", "unknown", "done")),
                ),
                name="journal_step_once_per_object",
            ),
        ),
        migrations.AddConstraint(
            model_name="step",
            constraint=models.UniqueConstraint(
                condition=models.Q(
                    ("offsets__isnull", False), ("state__in", ("pending", "unknown", "done"))
                ),
                fields=("offsets",),
                name="journal_step_one_undo_per_step",
            ),
        ),
        migrations.AddConstraint(
            model_name="task",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("status__in", ["runnable", "waiting", "needs_human", "finished", "cancelled"])
                ),
                name="journal_task_status_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="task",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("status", "waiting"), _negated=True),
                    ("wake_at__isnull", False),
                    _connector="OR",
                ),
                name="journal_task_waiting_has_wake_at",
            ),
        ),
        migrations.AddConstraint(
            model_name="task",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("status", "needs_human"), _negated=True),
                    models.Q(("attention_code", ""), _negated=True),
                    _connector="OR",
                ),
                name="journal_task_attention_has_code",
            ),
        ),
        migrations.RunSQL(RULES, UNRULES),
    ]
