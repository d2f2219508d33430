-- A step is born pending (its first attempt about to leave, no outcome) or not_done as a
-- refusal (code, sentence, no evidence), only into a runnable task under a live lease,
-- numbered by the task's count; a finish step only done, with no tool, as its task ends
-- (docs/design.md §4). Nothing is inserted done or unknown. Its key is its own
-- (journal_step_key of its task and number) or, for an undo, the key of the step of its task
-- it undoes, extended (journal.keys.undo_key): so a key names its task, and one unique in
-- its task's partition is unique in the journal; and an undo undoes a step of its own task
-- (the tables are partitioned and have no foreign keys: §17). Its counts are not negative and
-- it is settled (settled_at) exactly when it is done or not_done: the rules CHECK constraints
-- held before, which PostgreSQL reads and plans again at every statement (§14).
-- The step of an undo is read only for an undo, and only when the key is not the step's own.
CREATE OR REPLACE FUNCTION journal_step_born() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF NEW.kind = 'call' AND NOT EXISTS (
        SELECT 1 FROM journal_task t
         WHERE t.id = NEW.task_id AND t.status = 'runnable' AND t.step_count = NEW.n
           AND t.lease_expires_at > now()
    ) THEN
        RAISE EXCEPTION 'step %: a step is recorded only for a runnable task, by the holder of its lease, numbered by it', NEW.key
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.key IS DISTINCT FROM journal_step_key(p_task => NEW.task_id, p_n => NEW.n) THEN
        IF NEW.offsets_id IS NULL OR NOT starts_with(NEW.key, (
               SELECT s.key || ':' FROM journal_step s
                WHERE s.id = NEW.offsets_id AND s.task_id = NEW.task_id)) THEN
            RAISE EXCEPTION 'step %: a step''s key is its own (its task''s and number''s), or an undo''s the key of the step of its task it undoes', NEW.key
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    END IF;
    IF NEW.offsets_id IS NOT NULL THEN
        IF NOT EXISTS (
            SELECT 1 FROM journal_step s WHERE s.id = NEW.offsets_id AND s.task_id = NEW.task_id
        ) THEN
            RAISE EXCEPTION 'step %: an undo undoes a step of its own task', NEW.key
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    END IF;
    IF NEW.n < 0 OR NEW.retries < 0 OR NEW.attempts < 0 OR NEW.lookups < 0 THEN
        RAISE EXCEPTION 'step %: its number and counts are never negative', NEW.key
            USING ERRCODE = 'check_violation', CONSTRAINT = 'journal_step_counts_not_negative';
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
           OR NEW.outcome ? 'evidence' OR NEW.settled_at IS NULL THEN
            RAISE EXCEPTION 'step %: a step recorded not_done is a refusal, with its code and sentence, never attempted and with no evidence', NEW.key
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    ELSIF NEW.kind = 'finish' AND NEW.state = 'done' THEN
        IF NEW.tool <> '' OR NEW.args IS DISTINCT FROM '{}'::jsonb OR NEW.guard IS NOT NULL
           OR NEW.guard_key IS NOT NULL OR NEW.offsets_id IS NOT NULL OR NEW.attempts <> 0
           OR NEW.settled_at IS NULL OR NOT EXISTS (
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

DROP TRIGGER IF EXISTS journal_step_born ON journal_step;
CREATE TRIGGER journal_step_born
    BEFORE INSERT ON journal_step
    FOR EACH ROW EXECUTE FUNCTION journal_step_born();
