-- An entry is about a task that exists, and a step of that task if it names one (docs/design.md
-- §4): what the foreign keys said before the journal's tables were partitioned (§17), which a
-- range dropped whole could not keep. Checked as the entry is written; a finish's status
-- entry when the transaction commits, as the foreign keys were, since it names the finish
-- step, which is written after it (journal_finish). As the entry is written, the function
-- itself passes the finish's status entry by: a WHEN clause there would be read and planned
-- again at every statement (§14).
CREATE OR REPLACE FUNCTION journal_entry_born() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF TG_WHEN = 'BEFORE' AND NEW.kind = 'task_finished' AND NEW.step_id IS NOT NULL THEN
        RETURN NEW;  -- checked at commit (journal_entry_born_at_commit)
    END IF;
    IF NEW.step_id IS NOT NULL THEN
        IF NOT EXISTS (SELECT 1 FROM journal_step s WHERE s.id = NEW.step_id AND s.task_id = NEW.task_id) THEN
            RAISE EXCEPTION 'entry %: step % is not a step of task %', NEW.kind, NEW.step_id, NEW.task_id
                USING ERRCODE = 'foreign_key_violation';
        END IF;
    ELSIF NOT EXISTS (SELECT 1 FROM journal_task t WHERE t.id = NEW.task_id) THEN
        RAISE EXCEPTION 'entry %: there is no task %', NEW.kind, NEW.task_id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS journal_entry_born ON journal_entry;
CREATE TRIGGER journal_entry_born
    BEFORE INSERT ON journal_entry
    FOR EACH ROW EXECUTE FUNCTION journal_entry_born();

-- The WHEN clause is written as PostgreSQL prints it back (tests/journal/test_sql_files.py).
DROP TRIGGER IF EXISTS journal_entry_born_at_commit ON journal_entry;
CREATE CONSTRAINT TRIGGER journal_entry_born_at_commit
    AFTER INSERT ON journal_entry
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN ((((new.kind)::text = 'task_finished'::text) AND (new.step_id IS NOT NULL)))
    EXECUTE FUNCTION journal_entry_born();
