-- A decided call, written down before anything acts on it (docs/design.md §4): fences the
-- lease of a runnable task (and, with p_forward, one that is not unwinding), numbers the
-- step, inserts it and its one entry. The step is pending, its first attempt started (no
-- p_refusal), or not_done as a refusal: its code, its sentence (p_detail) and facts
-- (p_outcome), never sent. Its key is p_key (a compensation's) or journal_step_key. No row:
-- the lease was lost or the task moved, and nothing was written. p_fenced: the caller fenced
-- the lease of the runnable task (not unwinding, with p_forward) in this very statement
-- already, and this is the number its fence took for this step, p_fenced_version the
-- version (journal_settle_record, the one caller that passes them): the task's row is locked
-- by this transaction until it commits, so it is neither read nor written again.
CREATE OR REPLACE FUNCTION journal_record(
    p_task uuid, p_token bigint, p_lease float8, p_tool text, p_args jsonb,
    p_decision jsonb, p_entry jsonb,
    p_forward boolean DEFAULT true, p_cost text DEFAULT '', p_guard text DEFAULT NULL,
    p_guard_key text DEFAULT NULL, p_once boolean DEFAULT false, p_offsets integer DEFAULT NULL,
    p_retries integer DEFAULT 0, p_undo_tool text DEFAULT '', p_trusted float8 DEFAULT 0,
    p_lookup float8 DEFAULT 0, p_key text DEFAULT NULL, p_refusal text DEFAULT '',
    p_detail text DEFAULT '', p_outcome jsonb DEFAULT '{}'::jsonb,
    p_entry_kind text DEFAULT 'step_recorded', p_fenced integer DEFAULT NULL,
    p_fenced_version bigint DEFAULT NULL)
RETURNS TABLE (step_id bigint, step_n integer, step_key text, task_version bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_offsets bigint;
    v_entry bigint;
    v_refused boolean := p_refusal <> '';
BEGIN
    IF p_fenced IS NOT NULL THEN
        step_n := p_fenced;
        task_version := p_fenced_version;
    ELSE
        SELECT f.fenced_steps, f.fenced_version INTO step_n, task_version
          FROM journal_fence(p_task => p_task, p_token => p_token, p_lease => p_lease,
                             p_steps => 1, p_runnable => true, p_forward => p_forward) AS f;
        IF NOT FOUND THEN
            RETURN;
        END IF;
    END IF;
    IF p_offsets IS NOT NULL THEN
        SELECT s.id INTO v_offsets FROM journal_step s WHERE s.task_id = p_task AND s.n = p_offsets;
    END IF;
    INSERT INTO journal_step (
        task_id, n, kind, tool, args, key, cost, guard, guard_key, once, offsets_id, retries,
        undo_tool, refusal, state, detail, outcome, attempts, lookups, first_started_at,
        key_trusted_until, lookup_until, settled_at, decision, created_at)
    VALUES (
        p_task, step_n, 'call', p_tool, p_args,
        COALESCE(p_key, journal_step_key(p_task => p_task, p_n => step_n)),
        p_cost, p_guard, p_guard_key,
        p_once AND NOT v_refused, v_offsets, p_retries, p_undo_tool, p_refusal,
        CASE WHEN v_refused THEN 'not_done' ELSE 'pending' END,
        p_detail, p_outcome,
        CASE WHEN v_refused THEN 0 ELSE 1 END, 0,
        CASE WHEN v_refused THEN NULL ELSE now() END,
        CASE WHEN v_refused THEN NULL ELSE now() + make_interval(secs => p_trusted) END,
        CASE WHEN v_refused THEN NULL ELSE now() + make_interval(secs => p_lookup) END,
        CASE WHEN v_refused THEN now() END,
        p_decision, now())
    RETURNING id, key INTO step_id, step_key;
    v_entry := journal_entry_add(
        p_task => p_task, p_step => step_id, p_kind => p_entry_kind, p_actor => '',
        p_data => CASE WHEN v_refused THEN p_entry
                       ELSE p_entry || jsonb_build_object('key', step_key, 'attempt', 1) END);
    RETURN NEXT;
END
$$;
