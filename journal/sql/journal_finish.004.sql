-- Finishing a task (docs/design.md §14), the decision that it is over, recorded as its last
-- step: under the lease of a runnable task (journal_hold), moves it to finished, or for a saga
-- whose every done effect was undone (unwinding) to compensated, through journal_transition,
-- giving the lease back in the same statement, and writes the finish step, numbered like any
-- step, with the summary as its evidence. The status entry names the finish step. p_settles:
-- the settlement of the step the runner attempted last, held back to be written here first
-- (one commit for the last step and the finish). Returns the finish step's id, number and
-- key, the task's version before and after, and what became of p_settles; step_id is NULL
-- when the task moved (no longer runnable) or the held settlement met a contradicting report,
-- and nothing was finished. No row: the lease was lost, and nothing was written.
CREATE OR REPLACE FUNCTION journal_finish(
    p_task uuid, p_token bigint, p_lease float8, p_to text, p_shortfall boolean,
    p_detail text, p_outcome jsonb, p_decision jsonb, p_entry jsonb,
    p_settles jsonb DEFAULT NULL)
RETURNS TABLE (step_id bigint, step_n integer, step_key text, version_was bigint,
               task_version bigint, settled text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_ok boolean;
    v_moved text;
BEGIN
    IF p_to NOT IN ('finished', 'compensated') THEN
        RAISE EXCEPTION 'a task finishes finished or compensated, not %', p_to
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF jsonb_typeof(p_outcome->'evidence') IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'a finish step carries its summary as its evidence'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT h.ok, h.held_steps, h.version_was, h.settled
      INTO v_ok, step_n, version_was, settled
      FROM journal_hold(p_task => p_task, p_token => p_token, p_lease => p_lease,
                        p_settles => p_settles, p_steps => 1, p_runnable => true) h;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v_ok AND (p_to = 'compensated') <> (SELECT t.unwinding FROM journal_task t WHERE t.id = p_task) THEN
        RAISE EXCEPTION 'task %: a saga that unwinds ends compensated, any other task finished', p_task
            USING ERRCODE = 'check_violation';
    END IF;
    IF NOT v_ok THEN
        SELECT t.version INTO task_version FROM journal_task t WHERE t.id = p_task;
        step_n := NULL;
        RETURN NEXT;
        RETURN;
    END IF;
    -- The step's id first: the status entry names it.
    step_id := nextval(pg_get_serial_sequence('journal_step', 'id'));
    step_key := journal_step_key(p_task => p_task, p_n => step_n);
    INSERT INTO journal_step (
        id, task_id, n, kind, tool, args, key, cost, once, retries, undo_tool, refusal, state,
        detail, outcome, attempts, lookups, settled_at, decision, created_at)
    VALUES (
        step_id, p_task, step_n, 'finish', '', '{}', step_key, '', false, 0, '', '', 'done',
        p_detail, p_outcome, 0, 0, now(), p_decision, now());
    UPDATE journal_task t SET shortfall = p_shortfall WHERE t.id = p_task;
    SELECT t.moved_from, t.task_version INTO v_moved, task_version
      FROM journal_transition(
          p_task => p_task, p_to => p_to, p_from => ARRAY['runnable'], p_step => step_id,
          p_data => p_entry, p_release => p_token) t;
    IF v_moved IS NULL THEN  -- cannot be: the hold saw it runnable, under its lock
        RAISE EXCEPTION 'task %: not runnable after its hold', p_task;
    END IF;
    RETURN NEXT;
END
$$;
