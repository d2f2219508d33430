"""What a foothold with the app's own credentials could still do, refused by PostgreSQL.

- **Object names in one normal form.** ``Step.guard_key`` holds what the guards compare:
  the object's name in its normal form (NFKC, invisible characters removed, white space
  collapsed, case folded), or a digest of it when long (``journal.keys.object_key``). The
  two guard indexes move from ``lower(guard)`` to it; ``guard`` stays the name people read.
  Existing steps get their key from the same Python function (one rule, not a second in
  SQL). Old data holding two standing once-only effects on names that are now one object
  stops this migration at the unique index: a person decides which stands.
- **A step is born pending or refused.** A call step is inserted ``pending`` (recorded, its
  first attempt about to leave: no outcome, not settled) or ``not_done`` with the refusal
  code and sentence that kept it from running (no evidence), and only into a runnable task
  under a live lease, numbered by the task's own count; a finish step only ``done``, with
  no tool, for a task that is over. Nothing is inserted ``done`` or ``unknown``.
- **An undo is what it says.** ``offset_by`` may be set only once, on a done step, to a
  ``done`` step of the same task that was recorded as the undo of this very step
  (``offsets``), with the tool this step declared as its undo.
- ``journal_record`` takes the normal form with the name.
- A new attention code, ``misconfigured``: the provider refused us, not the business action.

Triggers bind the owner as well as the app role. Every journal function resolves tables in
the schema it was made in, then ``pg_temp`` *last*: a temporary table of the same name (any
role may make one unless refused; ``agentops/dbroles.py`` refuses it to the app) can never
stand in for a journal table. Irreversible: its functions and triggers are what the code of
this version expects; stop the workers before migrating.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

from journal.keys import UnsafeName, object_key


def _search_path(apps: Any, schema_editor: Any) -> None:
    """Pin every journal function's search path: this schema, then pg_temp last."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT p.oid::regprocedure::text, current_schema()
              FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = current_schema() AND p.proname LIKE 'journal\\_%%'
            """
        )
        for function, schema in cursor.fetchall():
            quoted = schema_editor.quote_name(schema)
            cursor.execute(
                f"ALTER FUNCTION {function} SET search_path = pg_catalog, {quoted}, pg_temp"
            )


def _guard_keys(apps: Any, schema_editor: Any) -> None:
    Step = apps.get_model("journal", "Step")
    # Settled steps are frozen by a trigger; this is the one change made to them, by the
    # owner, inside the migration's transaction.
    schema_editor.execute("ALTER TABLE journal_step DISABLE TRIGGER USER")
    for pk, guard in Step.objects.filter(guard__isnull=False).values_list("pk", "guard"):
        try:
            key = object_key(guard)
        except UnsafeName:
            key = guard.casefold()  # recorded before names were checked: kept, compared as is
        Step.objects.filter(pk=pk).update(guard_key=key)
    schema_editor.execute("ALTER TABLE journal_step ENABLE TRIGGER USER")


RULES = r"""
CREATE OR REPLACE FUNCTION journal_step_rules() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'journal steps are never deleted (step %)', OLD.key
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.key IS DISTINCT FROM OLD.key OR NEW.args IS DISTINCT FROM OLD.args
       OR NEW.tool IS DISTINCT FROM OLD.tool OR NEW.task_id IS DISTINCT FROM OLD.task_id
       OR NEW.n IS DISTINCT FROM OLD.n OR NEW.kind IS DISTINCT FROM OLD.kind
       OR NEW.guard IS DISTINCT FROM OLD.guard OR NEW.guard_key IS DISTINCT FROM OLD.guard_key
       OR NEW.once IS DISTINCT FROM OLD.once
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
    IF NEW.offset_by_id IS DISTINCT FROM OLD.offset_by_id THEN
        IF OLD.offset_by_id IS NOT NULL OR NEW.state <> 'done' THEN
            RAISE EXCEPTION 'step %: only a done step is undone, and only once', OLD.key
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        IF NOT EXISTS (
            SELECT 1 FROM journal_step u
             WHERE u.id = NEW.offset_by_id AND u.task_id = OLD.task_id
               AND u.offsets_id = OLD.id AND u.state = 'done' AND u.kind = 'call'
               AND u.tool = OLD.undo_tool AND OLD.undo_tool <> ''
        ) THEN
            RAISE EXCEPTION 'step %: it is undone only by a done % of the same task recorded as its undo', OLD.key, NULLIF(OLD.undo_tool, '')
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION journal_step_born() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.kind = 'call' AND NOT EXISTS (
        SELECT 1 FROM journal_task t
         WHERE t.id = NEW.task_id AND t.status = 'runnable' AND t.step_count = NEW.n
           AND t.lease_expires_at > now()
    ) THEN
        RAISE EXCEPTION 'step %: a step is recorded only for a runnable task, by the holder of its lease, numbered by it', NEW.key
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.kind = 'call' AND NEW.state = 'pending' THEN
        IF NEW.outcome IS DISTINCT FROM '{}'::jsonb OR NEW.detail <> '' OR NEW.refusal <> ''
           OR NEW.settled_at IS NOT NULL OR NEW.offset_by_id IS NOT NULL
           OR NEW.attempts > 1 OR NEW.lookups <> 0 THEN
            RAISE EXCEPTION 'step %: a step recorded to be attempted carries no outcome yet', NEW.key
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    ELSIF NEW.kind = 'call' AND NEW.state = 'not_done' THEN
        IF NEW.refusal = '' OR NEW.detail = '' OR NEW.attempts <> 0 OR NEW.lookups <> 0
           OR NEW.offset_by_id IS NOT NULL OR jsonb_typeof(NEW.outcome) <> 'object'
           OR NEW.outcome ? 'evidence' THEN
            RAISE EXCEPTION 'step %: a step recorded not_done is a refusal, with its code and sentence, never attempted and with no evidence', NEW.key
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    ELSIF NEW.kind = 'finish' AND NEW.state = 'done' THEN
        IF NEW.tool <> '' OR NEW.args IS DISTINCT FROM '{}'::jsonb OR NEW.guard IS NOT NULL
           OR NEW.guard_key IS NOT NULL OR NEW.offsets_id IS NOT NULL OR NEW.attempts <> 0
           OR NOT EXISTS (
               SELECT 1 FROM journal_task t
                WHERE t.id = NEW.task_id AND t.status IN ('finished', 'compensated')
           ) THEN
            RAISE EXCEPTION 'step %: a finish step is written with no tool, as its task ends', NEW.key
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    ELSE
        RAISE EXCEPTION 'step %: a % step is never recorded %', NEW.key, NEW.kind, NEW.state
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER journal_step_born
    BEFORE INSERT ON journal_step
    FOR EACH ROW EXECUTE FUNCTION journal_step_born();

DROP FUNCTION journal_record(uuid, bigint, float8, boolean, text, jsonb, text, text, boolean,
    integer, integer, text, float8, float8, jsonb, text, jsonb);

CREATE FUNCTION journal_record(
    p_task uuid, p_token bigint, p_lease float8, p_forward boolean, p_tool text,
    p_args jsonb, p_cost text, p_guard text, p_guard_key text, p_once boolean,
    p_offsets integer, p_retries integer, p_undo_tool text, p_trusted float8,
    p_lookup float8, p_decision jsonb, p_key text, p_entry jsonb)
RETURNS TABLE (step_id bigint, step_n integer, step_key text, task_version bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_offsets bigint;
BEGIN
    UPDATE journal_task
       SET step_count = step_count + 1,
           lease_expires_at = now() + make_interval(secs => p_lease),
           version = version + 1
     WHERE id = p_task AND lease_token = p_token AND status = 'runnable'
       AND (NOT p_forward OR NOT unwinding)
    RETURNING step_count, version INTO step_n, task_version;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_offsets IS NOT NULL THEN
        SELECT id INTO v_offsets FROM journal_step WHERE task_id = p_task AND n = p_offsets;
    END IF;
    INSERT INTO journal_step (
        task_id, n, kind, tool, args, key, cost, guard, guard_key, once, offsets_id, retries,
        undo_tool, refusal, state, detail, outcome, attempts, lookups, first_started_at,
        key_trusted_until, lookup_until, decision, created_at)
    VALUES (
        p_task, step_n, 'call', p_tool, p_args,
        COALESCE(p_key, 'ao:' || p_task || ':' || step_n), p_cost, p_guard, p_guard_key,
        p_once, v_offsets, p_retries, p_undo_tool, '', 'pending', '', '{}', 1, 0, now(),
        now() + make_interval(secs => p_trusted), now() + make_interval(secs => p_lookup),
        p_decision, now())
    RETURNING id, key INTO step_id, step_key;
    INSERT INTO journal_entry (task_id, step_id, kind, at, actor, data)
    VALUES (p_task, step_id, 'step_recorded', now(), '',
            p_entry || jsonb_build_object('key', step_key, 'attempt', 1));
    RETURN NEXT;
END
$$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("journal", "0008_finish"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="step",
            name="journal_step_one_live_effect_per_object",
        ),
        migrations.RemoveConstraint(
            model_name="step",
            name="journal_step_once_per_object",
        ),
        migrations.AddField(
            model_name="step",
            name="guard_key",
            field=models.CharField(
                blank=True,
                help_text="The object's name in its normal form, as the guards compare it.",
                max_length=255,
                null=True,
            ),
        ),
        migrations.RunPython(_guard_keys),
        migrations.AddConstraint(
            model_name="step",
            constraint=models.UniqueConstraint(
                condition=models.Q(
                    ("guard_key__isnull", False), ("state__in", ("pending", "unknown"))
                ),
                fields=("guard_key",),
                name="journal_step_one_live_effect_per_object",
            ),
        ),
        migrations.AddConstraint(
            model_name="step",
            constraint=models.UniqueConstraint(
                condition=models.Q(
                    ("guard_key__isnull", False),
                    ("offset_by__isnull", True),
                    ("once", True),
                    ("state__in", ("pending", "unknown", "done")),
                ),
                fields=("guard_key",),
                name="journal_step_once_per_object",
            ),
        ),
        migrations.AlterField(
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
                    ("compensation_failed", "a compensation did not happen"),
                    ("misconfigured", "our side is misconfigured"),
                    ("effect_lapsed", "an effect lapsed"),
                    ("parked", "parked"),
                ],
                max_length=30,
            ),
        ),
        migrations.RunSQL(RULES),
        migrations.RunPython(_search_path),
    ]
