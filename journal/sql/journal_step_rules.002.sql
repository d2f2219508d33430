-- A step's identity is frozen once recorded (its key, tool, arguments, object, once-flag,
-- undo link, retries, refusal, cost, deadlines), and steps are never deleted (docs/design.md
-- §4). Only a write that names one of those columns can change it (no trigger on the journal
-- changes a row: tests/journal/test_rules_in_triggers.py), so only such a write is looked
-- at: a settlement names none. How a step moves is journal_step_moves'.
CREATE OR REPLACE FUNCTION journal_step_rules() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
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
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS journal_step_frozen ON journal_step;
CREATE TRIGGER journal_step_frozen
    BEFORE DELETE OR UPDATE OF key, args, tool, task_id, n, kind, guard, guard_key, once,
        offsets_id, retries, refusal, cost, first_started_at, key_trusted_until, lookup_until
    ON journal_step
    FOR EACH ROW EXECUTE FUNCTION journal_step_rules();
