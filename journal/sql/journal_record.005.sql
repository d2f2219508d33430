-- A decided call, written down before anything acts on it (docs/design.md §4): under the
-- lease of a runnable task (and, with p_forward, one that is not unwinding: journal_hold),
-- numbers the step, inserts it and its one entry. The step is pending, its first attempt
-- started (no p_refusal), or not_done as a refusal: its code, its sentence (p_detail) and
-- facts (p_outcome, never evidence), never sent. Its key is journal_step_key's; an undo's
-- (p_offsets: the number of the done step of this task it undoes, by the tool that step
-- declared as its undo) is p_key, which extends that step's key. With p_approval, the
-- person's approval of exactly this call (its tool and arguments) is used up by the step in
-- the same statement, or nothing is written (SQLSTATE AO002). p_settles: the settlement of
-- the step the runner attempted last, held back to be written here first (journal_hold;
-- docs/design.md §4, "One commit per step"). A guard's refusal raises as the claim's unique
-- violation (journal_step_claims), and nothing is written.
--
-- Returns the step's id, number and key, the task's version before and after, and what
-- became of p_settles; step_id is NULL when nothing was recorded because the task moved (no
-- longer runnable, or unwinding) or the held settlement met a contradicting report. No row:
-- the lease was lost, and nothing was written.
CREATE OR REPLACE FUNCTION journal_record(
    p_task uuid, p_token bigint, p_lease float8, p_tool text, p_args jsonb,
    p_decision jsonb, p_entry jsonb,
    p_forward boolean DEFAULT true, p_cost text DEFAULT '', p_guard text DEFAULT NULL,
    p_guard_key text DEFAULT NULL, p_once boolean DEFAULT false, p_offsets integer DEFAULT NULL,
    p_retries integer DEFAULT 0, p_undo_tool text DEFAULT '', p_trusted float8 DEFAULT 0,
    p_lookup float8 DEFAULT 0, p_key text DEFAULT NULL, p_refusal text DEFAULT '',
    p_detail text DEFAULT '', p_outcome jsonb DEFAULT '{}'::jsonb,
    p_entry_kind text DEFAULT 'step_recorded', p_approval bigint DEFAULT NULL,
    p_settles jsonb DEFAULT NULL)
RETURNS TABLE (step_id bigint, step_n integer, step_key text, version_was bigint,
               task_version bigint, settled text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_ok boolean;
    v_offsets bigint;
    v_refused boolean := p_refusal <> '';
    v_target journal_step;
BEGIN
    IF v_refused AND (p_detail = '' OR jsonb_typeof(p_outcome) <> 'object' OR p_outcome ? 'evidence') THEN
        RAISE EXCEPTION 'a refused step carries its code, its sentence and no evidence'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF p_retries < 0 OR p_trusted < 0 OR p_lookup < 0 THEN
        RAISE EXCEPTION 'a step''s retries and deadlines are never negative'
            USING ERRCODE = 'check_violation';
    END IF;
    IF p_entry_kind NOT IN ('step_recorded', 'decision_rejected', 'decision_refused', 'guard_refused')
       OR (p_entry_kind = 'step_recorded') = v_refused THEN
        RAISE EXCEPTION 'a step is recorded (step_recorded) or refused (decision_rejected, decision_refused, guard_refused), not %', p_entry_kind
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT h.ok, h.held_steps, h.version_was, h.held_version, h.settled
      INTO v_ok, step_n, version_was, task_version, settled
      FROM journal_hold(p_task => p_task, p_token => p_token, p_lease => p_lease,
                        p_settles => p_settles, p_steps => 1, p_runnable => true,
                        p_forward => p_forward) h;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF NOT v_ok THEN
        step_n := NULL;
        RETURN NEXT;
        RETURN;
    END IF;
    IF p_offsets IS NOT NULL THEN
        SELECT * INTO v_target FROM journal_step s WHERE s.task_id = p_task AND s.n = p_offsets;
        IF NOT FOUND OR (NOT v_refused AND (v_target.state <> 'done' OR v_target.undo_tool = ''
                                            OR v_target.undo_tool <> p_tool
                                            OR v_target.offset_by_id IS NOT NULL)) THEN
            RAISE EXCEPTION 'step % of task % is not a done step that % undoes', p_offsets, p_task, p_tool
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        v_offsets := v_target.id;
    END IF;
    IF p_key IS NOT NULL AND (v_offsets IS NULL OR NOT starts_with(p_key, v_target.key || ':')) THEN
        RAISE EXCEPTION 'a step''s key is its own, or an undo''s the key of the step it undoes, extended'
            USING ERRCODE = 'insufficient_privilege';
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
    PERFORM journal_entry_add(
        p_task => p_task, p_step => step_id, p_kind => p_entry_kind, p_actor => '',
        p_data => CASE WHEN v_refused THEN p_entry
                       ELSE p_entry || jsonb_build_object('key', step_key, 'attempt', 1) END);
    IF p_approval IS NOT NULL THEN
        UPDATE journal_approval a SET state = 'used', used_by_id = step_id
         WHERE a.id = p_approval AND a.task_id = p_task AND a.state = 'approved'
           AND a.tool = p_tool AND a.args = p_args AND a.expires_at > now();
        IF NOT FOUND THEN
            RAISE EXCEPTION 'approval % is not for this call now (approved, unexpired, for % with these arguments)', p_approval, p_tool
                USING ERRCODE = 'AO002';
        END IF;
    END IF;
    RETURN NEXT;
END
$$;
