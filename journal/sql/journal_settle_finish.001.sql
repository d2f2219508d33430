-- The last step's settlement and the task's finish in one commit (docs/design.md §4, "One
-- commit per step"; §14): journal_settle, then journal_finish, in one statement, as
-- journal_settle_record does for a step's settlement and the next one's record. The runner
-- sends it when the planner decided, from the settled outcome, that the task is over. The
-- lease is fenced once, for both, numbering the finish step; the two are told the number and
-- version it took (p_fenced). If the step had settled otherwise before the fence (a webhook
-- said the opposite), the task is not finished and the number is given back: settled_state
-- says what stands and step_id is NULL, for the caller to record the conflict. step_id is
-- NULL too when the task moved (no longer runnable): the step is settled alone then, as
-- journal_settle does. No row: the lease was lost, and nothing was written.
CREATE OR REPLACE FUNCTION journal_settle_finish(
    p_step bigint, p_state text, p_detail text, p_outcome jsonb, p_settled jsonb,
    p_task uuid, p_token bigint, p_lease float8, p_to text, p_shortfall boolean,
    p_summary text, p_finished jsonb, p_decision jsonb, p_entry jsonb)
RETURNS TABLE (settled_changed boolean, settled_version bigint, settled_state text,
               settled_key text, step_id bigint, step_n integer, step_key text,
               task_version bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_n integer;
    v_version bigint;
BEGIN
    SELECT f.fenced_steps, f.fenced_version INTO v_n, v_version
      FROM journal_fence(p_task => p_task, p_token => p_token, p_lease => p_lease,
                         p_steps => 1, p_runnable => true) AS f;
    IF NOT FOUND THEN
        -- Lost, or moved: the settlement alone, fenced as it would be on its own.
        SELECT s.changed, s.task_version, s.step_state, s.step_key
          INTO settled_changed, settled_version, settled_state, settled_key
          FROM journal_settle(
              p_step => p_step, p_state => p_state, p_detail => p_detail,
              p_outcome => p_outcome, p_entry => p_settled, p_via => 'attempt',
              p_task => p_task, p_token => p_token, p_lease => p_lease) AS s;
        IF FOUND THEN
            RETURN NEXT;
        END IF;
        RETURN;
    END IF;
    SELECT s.changed, s.task_version, s.step_state, s.step_key
      INTO settled_changed, settled_version, settled_state, settled_key
      FROM journal_settle(
          p_step => p_step, p_state => p_state, p_detail => p_detail, p_outcome => p_outcome,
          p_entry => p_settled, p_via => 'attempt', p_task => p_task, p_token => p_token,
          p_lease => p_lease, p_fenced => v_version) AS s;
    IF NOT FOUND THEN  -- the fence above holds the row: never, unless the rules moved
        RAISE EXCEPTION 'journal_settle_finish: task % lost its fence mid-statement', p_task;
    END IF;
    IF NOT settled_changed AND settled_state IS DISTINCT FROM p_state THEN
        -- The task is not over after all: the number the fence took is given back.
        UPDATE journal_task t SET step_count = t.step_count - 1 WHERE t.id = p_task;
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT f.step_id, f.step_n, f.step_key, f.task_version
      INTO step_id, step_n, step_key, task_version
      FROM journal_finish(
          p_task => p_task, p_token => p_token, p_lease => p_lease, p_to => p_to,
          p_shortfall => p_shortfall, p_detail => p_summary, p_outcome => p_finished,
          p_decision => p_decision, p_entry => p_entry, p_fenced => v_n) AS f;
    RETURN NEXT;
END
$$;
