-- Finishing a task (docs/design.md §14): fences the lease of a runnable task, moves it to
-- finished (or compensated) through journal_transition, giving the lease back, and writes the
-- finish step, numbered like any step, with the summary as its evidence. The status entry
-- names the finish step. No row: the lease was lost or the task moved; nothing was written.
-- p_fenced: the caller fenced the lease of the runnable task in this very statement already,
-- and this is the number its fence took for the finish step (journal_settle_finish, the one
-- caller that passes it): the task's row is locked by this transaction until it commits.
CREATE OR REPLACE FUNCTION journal_finish(
    p_task uuid, p_token bigint, p_lease float8, p_to text, p_shortfall boolean,
    p_detail text, p_outcome jsonb, p_decision jsonb, p_entry jsonb,
    p_fenced integer DEFAULT NULL)
RETURNS TABLE (step_id bigint, step_n integer, step_key text, task_version bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_moved text;
BEGIN
    IF p_fenced IS NOT NULL THEN
        step_n := p_fenced;
    ELSE
        SELECT f.fenced_steps INTO step_n
          FROM journal_fence(p_task => p_task, p_token => p_token, p_lease => p_lease,
                             p_steps => 1, p_runnable => true) AS f;
        IF NOT FOUND THEN
            RETURN;
        END IF;
    END IF;
    -- The step's id first: the status entry names it (foreign keys are checked at commit).
    step_id := nextval(pg_get_serial_sequence('journal_step', 'id'));
    SELECT t.moved_from, t.task_version INTO v_moved, task_version
      FROM journal_transition(
          p_task => p_task, p_to => p_to, p_from => ARRAY['runnable'], p_token => p_token,
          p_fence => false,
          p_release => true, p_step => step_id, p_data => p_entry) AS t;
    IF v_moved IS NULL THEN  -- cannot be: the fence saw it runnable, under its lock
        RAISE EXCEPTION 'task %: not runnable after its fence', p_task;
    END IF;
    UPDATE journal_task t SET shortfall = p_shortfall WHERE t.id = p_task;
    step_key := journal_step_key(p_task => p_task, p_n => step_n);
    INSERT INTO journal_step (
        id, task_id, n, kind, tool, args, key, cost, once, retries, undo_tool, refusal, state,
        detail, outcome, attempts, lookups, settled_at, decision, created_at)
    VALUES (
        step_id, p_task, step_n, 'finish', '', '{}', step_key, '', false, 0, '', '', 'done',
        p_detail, p_outcome, 0, 0, now(), p_decision, now());
    RETURN NEXT;
END
$$;
