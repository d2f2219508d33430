"""Rules PostgreSQL enforces whatever the code does.

- Entries are append-only: UPDATE, DELETE and TRUNCATE on journal_entry are refused.
- A step's identity is frozen once recorded: its task, number, tool, arguments and key.
- A settled step (done / not done) never changes state again.
"""

from __future__ import annotations

from django.db import migrations

FORWARD = r"""
CREATE FUNCTION journal_entry_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'journal entries are append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE TRIGGER journal_entry_no_update_or_delete
    BEFORE UPDATE OR DELETE ON journal_entry
    FOR EACH ROW EXECUTE FUNCTION journal_entry_append_only();

CREATE TRIGGER journal_entry_no_truncate
    BEFORE TRUNCATE ON journal_entry
    FOR EACH STATEMENT EXECUTE FUNCTION journal_entry_append_only();

CREATE FUNCTION journal_step_rules() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE TRIGGER journal_step_frozen
    BEFORE UPDATE OR DELETE ON journal_step
    FOR EACH ROW EXECUTE FUNCTION journal_step_rules();

CREATE TRIGGER journal_step_no_truncate
    BEFORE TRUNCATE ON journal_step
    FOR EACH STATEMENT EXECUTE FUNCTION journal_entry_append_only();
"""

BACKWARD = r"""
DROP TRIGGER journal_step_no_truncate ON journal_step;
DROP TRIGGER journal_step_frozen ON journal_step;
DROP FUNCTION journal_step_rules();
DROP TRIGGER journal_entry_no_truncate ON journal_entry;
DROP TRIGGER journal_entry_no_update_or_delete ON journal_entry;
DROP FUNCTION journal_entry_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [("journal", "0001_initial")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
