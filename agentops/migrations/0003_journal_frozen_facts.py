"""Facts the database freezes even against writes the app's role may make (docs/design.md §4).

Column privileges (agentops/dbroles.py) let the app role update a step's outcome, detail
and timestamps, because settling a step is its job. Once a step is settled (done or not
done), this trigger freezes the whole row: outcome and evidence, detail, timestamps,
counters and the planner's decision. A task's kind, goal and references never change, and
tasks, like entries, are never deleted or truncated.

Kept apart from journal/migrations/0002_database_rules.py (which it complements and does not
change). A later column that must change after a step settles goes into
MUTABLE_AFTER_SETTLEMENT in a new migration that replaces the function.
"""

from __future__ import annotations

from django.db import migrations

# Columns a settled step may still change: the link to the done step that undid it (set once,
# from nothing, on a done step: journal migration 0004's trigger holds that).
MUTABLE_AFTER_SETTLEMENT: tuple[str, ...] = ("offset_by_id",)

FORWARD = r"""
CREATE FUNCTION journal_step_settled_frozen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state IN ('done', 'not_done')
       AND (to_jsonb(NEW) - MUTABLE_COLUMNS) IS DISTINCT FROM (to_jsonb(OLD) - MUTABLE_COLUMNS) THEN
        RAISE EXCEPTION 'step % is settled % and frozen: its outcome, evidence, timestamps and decision never change', OLD.key, OLD.state
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER journal_step_settled_frozen
    BEFORE UPDATE ON journal_step
    FOR EACH ROW EXECUTE FUNCTION journal_step_settled_frozen();

CREATE FUNCTION journal_task_facts_frozen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'UPDATE' THEN
        RAISE EXCEPTION 'journal tasks are never deleted: % refused', TG_OP
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.id IS DISTINCT FROM OLD.id OR NEW.kind IS DISTINCT FROM OLD.kind
       OR NEW.goal IS DISTINCT FROM OLD.goal OR NEW.refs IS DISTINCT FROM OLD.refs
       OR NEW.created_at IS DISTINCT FROM OLD.created_at THEN
        RAISE EXCEPTION 'task % is frozen: its kind, goal and references never change', OLD.id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER journal_task_facts_frozen
    BEFORE UPDATE OR DELETE ON journal_task
    FOR EACH ROW EXECUTE FUNCTION journal_task_facts_frozen();

CREATE TRIGGER journal_task_no_truncate
    BEFORE TRUNCATE ON journal_task
    FOR EACH STATEMENT EXECUTE FUNCTION journal_task_facts_frozen();
""".replace("MUTABLE_COLUMNS", "'{" + ",".join(MUTABLE_AFTER_SETTLEMENT) + "}'::text[]")

BACKWARD = r"""
DROP TRIGGER journal_task_no_truncate ON journal_task;
DROP TRIGGER journal_task_facts_frozen ON journal_task;
DROP FUNCTION journal_task_facts_frozen();
DROP TRIGGER journal_step_settled_frozen ON journal_step;
DROP FUNCTION journal_step_settled_frozen();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0002_webhook_facts"),
        ("journal", "0004_task_state_machine"),
    ]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
