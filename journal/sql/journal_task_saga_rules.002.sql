-- A saga's plan never changes, and a saga that unwinds never stops unwinding (§7). Only a
-- write that names one of the two columns can change them, so only such a write is looked at.
CREATE OR REPLACE FUNCTION journal_task_saga_rules() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF NEW.plan IS DISTINCT FROM OLD.plan THEN
        RAISE EXCEPTION 'task %: its plan never changes', OLD.id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF OLD.unwinding AND NOT NEW.unwinding THEN
        RAISE EXCEPTION 'task %: a saga that unwinds never stops unwinding', OLD.id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS journal_task_saga_rules ON journal_task;
CREATE TRIGGER journal_task_saga_rules
    BEFORE UPDATE OF plan, unwinding ON journal_task
    FOR EACH ROW EXECUTE FUNCTION journal_task_saga_rules();
