-- A task's kind, goal and references never change, and tasks are never deleted (§4). Only a
-- write that names one of those columns can change it (no trigger on the journal changes a
-- row: tests/journal/test_sql_files.py), so only such a write is looked at: the lease's
-- fence, a step's every write, names none.
CREATE OR REPLACE FUNCTION journal_task_facts_frozen() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
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

DROP TRIGGER IF EXISTS journal_task_facts_frozen ON journal_task;
CREATE TRIGGER journal_task_facts_frozen
    BEFORE DELETE OR UPDATE OF id, kind, goal, refs, created_at ON journal_task
    FOR EACH ROW EXECUTE FUNCTION journal_task_facts_frozen();

DROP TRIGGER IF EXISTS journal_task_no_truncate ON journal_task;
CREATE TRIGGER journal_task_no_truncate
    BEFORE TRUNCATE ON journal_task
    FOR EACH STATEMENT EXECUTE FUNCTION journal_task_facts_frozen();
