-- A task's status moves only along the state machine of journal/status.py TRANSITIONS
-- (docs/design.md §7); tests/journal/test_status.py checks the two agree.
CREATE OR REPLACE FUNCTION journal_task_transition() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF NEW.status IS DISTINCT FROM OLD.status AND (OLD.status, NEW.status) NOT IN (
        ('runnable', 'waiting'), ('runnable', 'needs_human'), ('runnable', 'finished'),
        ('runnable', 'awaiting_approval'), ('runnable', 'compensated'),
        ('waiting', 'runnable'), ('waiting', 'needs_human'),
        ('awaiting_approval', 'runnable'), ('awaiting_approval', 'needs_human'),
        ('needs_human', 'runnable'), ('needs_human', 'finished'),
        ('needs_human', 'cancelled'), ('needs_human', 'compensated'),
        ('finished', 'needs_human'), ('cancelled', 'needs_human'),
        ('compensated', 'needs_human')
    ) THEN
        RAISE EXCEPTION 'task %: % -> % is not a transition of its state machine',
            OLD.id, OLD.status, NEW.status
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS journal_task_state_machine ON journal_task;
CREATE TRIGGER journal_task_state_machine
    BEFORE UPDATE OF status ON journal_task
    FOR EACH ROW EXECUTE FUNCTION journal_task_transition();
