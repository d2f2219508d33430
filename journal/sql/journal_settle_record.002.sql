-- A step's settlement and the next step's record in one commit (docs/design.md §4, "One
-- commit per step"): journal_settle, then journal_record, in one statement. The runner sends
-- it when the planner decided the next call at once from the settled outcome, so the record
-- is still durable before its call and the settlement before anything reads it (nothing
-- outside the runner reads a step it is still settling; a runner that dies first leaves the
-- step pending, and the next one looks it up). If the step had settled otherwise meanwhile
-- (a webhook said the opposite), nothing is recorded: settled_state says what stands and
-- step_id is NULL, for the caller to record the conflict. step_id is NULL too when the task
-- moved (no longer runnable, or unwinding); a guard's refusal raises as journal_record's.
-- No row: the lease was lost, and nothing was written.
CREATE OR REPLACE FUNCTION journal_settle_record(
    p_step bigint, p_state text, p_detail text, p_outcome jsonb, p_settled jsonb,
    p_task uuid, p_token bigint, p_lease float8, p_tool text, p_args jsonb,
    p_decision jsonb, p_entry jsonb,
    p_forward boolean DEFAULT true, p_cost text DEFAULT '', p_guard text DEFAULT NULL,
    p_guard_key text DEFAULT NULL, p_once boolean DEFAULT false, p_offsets integer DEFAULT NULL,
    p_retries integer DEFAULT 0, p_undo_tool text DEFAULT '', p_trusted float8 DEFAULT 0,
    p_lookup float8 DEFAULT 0)
RETURNS TABLE (settled_changed boolean, settled_version bigint, settled_state text,
               settled_key text, step_id bigint, step_n integer, step_key text,
               task_version bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    SELECT s.changed, s.task_version, s.step_state, s.step_key
      INTO settled_changed, settled_version, settled_state, settled_key
      FROM journal_settle(
          p_step => p_step, p_state => p_state, p_detail => p_detail, p_outcome => p_outcome,
          p_entry => p_settled, p_via => 'attempt', p_task => p_task, p_token => p_token,
          p_lease => p_lease) AS s;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF NOT settled_changed AND settled_state IS DISTINCT FROM p_state THEN
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT r.step_id, r.step_n, r.step_key, r.task_version
      INTO step_id, step_n, step_key, task_version
      FROM journal_record(
          p_task => p_task, p_token => p_token, p_lease => p_lease, p_tool => p_tool,
          p_args => p_args, p_decision => p_decision, p_entry => p_entry,
          p_forward => p_forward, p_cost => p_cost, p_guard => p_guard,
          p_guard_key => p_guard_key, p_once => p_once, p_offsets => p_offsets,
          p_retries => p_retries, p_undo_tool => p_undo_tool, p_trusted => p_trusted,
          p_lookup => p_lookup) AS r;
    RETURN NEXT;
END
$$;
