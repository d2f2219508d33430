-- A step's settlement and the next step's record in one commit (docs/design.md §4, "One
-- commit per step"): journal_settle, then journal_record, in one statement. The runner sends
-- it when the planner decided the next call at once from the settled outcome, so the record
-- is still durable before its call and the settlement before anything reads it (nothing
-- outside the runner reads a step it is still settling; a runner that dies first leaves the
-- step pending, and the next one looks it up). The lease is fenced once, for both, numbering
-- the step to be recorded; the two are told the number and version it took (p_fenced) and
-- read the task's row no more. It stays locked until commit, so nobody settles the step
-- between the fence and the settlement, or moves the task. If the step had settled otherwise
-- before the fence (a webhook said the opposite), nothing is recorded and the number is given
-- back: settled_state says what stands and step_id is NULL, for the caller to record the
-- conflict. step_id is NULL too when the task moved (no longer runnable, or unwinding): the
-- step is settled alone then, as journal_settle does. A guard's refusal raises as
-- journal_record's. No row: the lease was lost, and nothing was written.
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
DECLARE
    v_n integer;
    v_version bigint;
BEGIN
    SELECT f.fenced_steps, f.fenced_version INTO v_n, v_version
      FROM journal_fence(p_task => p_task, p_token => p_token, p_lease => p_lease,
                         p_steps => 1, p_runnable => true, p_forward => p_forward) AS f;
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
        RAISE EXCEPTION 'journal_settle_record: task % lost its fence mid-statement', p_task;
    END IF;
    IF NOT settled_changed AND settled_state IS DISTINCT FROM p_state THEN
        -- No step is recorded after all: the number the fence took is given back.
        UPDATE journal_task t SET step_count = t.step_count - 1 WHERE t.id = p_task;
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
          p_lookup => p_lookup, p_fenced => v_n, p_fenced_version => v_version) AS r;
    RETURN NEXT;
END
$$;
