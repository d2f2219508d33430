-- A task is in one of its statuses (journal.status.TaskStatus: tests/journal/test_status.py
-- checks the two agree); one that waits has a time to wake, one in front of a person a code
-- saying why; its counts are never negative (docs/design.md §7). The rules CHECK constraints
-- held before, which PostgreSQL reads and plans again at every statement (§14): each is
-- raised as that constraint was, with its name.
CREATE OR REPLACE FUNCTION journal_task_rules() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF NEW.status IS NULL OR NEW.status NOT IN (
        'runnable', 'waiting', 'awaiting_approval', 'needs_human', 'finished', 'cancelled',
        'compensated'
    ) THEN
        RAISE EXCEPTION 'task %: % is not a status of a task', NEW.id, NEW.status
            USING ERRCODE = 'check_violation', CONSTRAINT = 'journal_task_status_valid';
    END IF;
    IF NEW.status = 'waiting' AND NEW.wake_at IS NULL THEN
        RAISE EXCEPTION 'task %: a waiting task has a time to wake', NEW.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'journal_task_waiting_has_wake_at';
    END IF;
    IF NEW.status = 'needs_human' AND NEW.attention_code = '' THEN
        RAISE EXCEPTION 'task %: a task in front of a person has a code saying why', NEW.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'journal_task_attention_has_code';
    END IF;
    IF NEW.step_count < 0 OR NEW.failed_runs < 0 THEN
        RAISE EXCEPTION 'task %: its counts are never negative', NEW.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'journal_task_counts_not_negative';
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS journal_task_rules ON journal_task;
CREATE TRIGGER journal_task_rules
    BEFORE INSERT OR UPDATE ON journal_task
    FOR EACH ROW EXECUTE FUNCTION journal_task_rules();
