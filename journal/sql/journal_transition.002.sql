-- A task's status changes here and nowhere else (docs/design.md §7): one UPDATE guarded by the
-- statuses it may come from (p_from), and one entry saying from what, to what, who and why.
-- The state machine itself is checked by journal_task_state_machine. With p_token (and
-- p_fence), the lease is checked first; with p_release, that lease is given back in the same
-- UPDATE (the run ends here). No row: the lease was lost. A row whose moved_from is NULL:
-- the task was in no status of p_from, and nothing was written.
CREATE OR REPLACE FUNCTION journal_transition(
    p_task uuid, p_to text, p_from text[],
    p_token bigint DEFAULT NULL, p_lease float8 DEFAULT NULL, p_fence boolean DEFAULT true,
    p_release boolean DEFAULT false, p_wake_at timestamptz DEFAULT NULL,
    p_wake_in float8 DEFAULT NULL, p_code text DEFAULT '', p_reason text DEFAULT '',
    p_actor text DEFAULT '', p_step bigint DEFAULT NULL, p_data jsonb DEFAULT '{}'::jsonb)
RETURNS TABLE (moved_from text, task_version bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_was text;
    v_data jsonb;
BEGIN
    IF p_token IS NOT NULL AND p_fence THEN
        PERFORM 1 FROM journal_fence(p_task => p_task, p_token => p_token, p_lease => p_lease);
        IF NOT FOUND THEN
            RETURN;
        END IF;
    END IF;
    SELECT t.status INTO v_was FROM journal_task t WHERE t.id = p_task FOR UPDATE;
    IF v_was IS NULL OR NOT (v_was = ANY (p_from)) THEN
        RETURN QUERY SELECT NULL::text, NULL::bigint;
        RETURN;
    END IF;
    UPDATE journal_task t
       SET status = p_to,
           wake_at = COALESCE(p_wake_at, now() + make_interval(secs => p_wake_in)),
           version = t.version + 1,
           attention = CASE WHEN p_to = 'needs_human' THEN p_reason ELSE '' END,
           attention_code = CASE WHEN p_to = 'needs_human' THEN p_code ELSE '' END,
           lease_expires_at = CASE WHEN p_release THEN NULL ELSE t.lease_expires_at END,
           lease_owner = CASE WHEN p_release THEN '' ELSE t.lease_owner END,
           lease_taken_at = CASE WHEN p_release THEN NULL ELSE t.lease_taken_at END,
           failed_runs = CASE WHEN p_release THEN 0 ELSE t.failed_runs END
     WHERE t.id = p_task AND t.status = v_was
       AND (NOT p_release OR t.lease_token = p_token)
    RETURNING t.version INTO task_version;
    IF NOT FOUND THEN
        RETURN QUERY SELECT NULL::text, NULL::bigint;
        RETURN;
    END IF;
    v_data := jsonb_build_object('from', v_was, 'to', p_to) || COALESCE(p_data, '{}'::jsonb);
    IF p_reason <> '' THEN
        v_data := v_data || jsonb_build_object('reason', p_reason);
    END IF;
    IF p_code <> '' THEN
        v_data := v_data || jsonb_build_object('code', p_code);
    END IF;
    PERFORM journal_entry_add(
        p_task => p_task, p_step => p_step,
        p_kind => CASE p_to
            WHEN 'runnable' THEN 'task_resumed'
            WHEN 'waiting' THEN 'task_waiting'
            WHEN 'awaiting_approval' THEN 'approval_requested'
            WHEN 'needs_human' THEN 'task_flagged'
            WHEN 'finished' THEN 'task_finished'
            WHEN 'compensated' THEN 'task_finished'
            WHEN 'cancelled' THEN 'task_cancelled'
        END,
        p_actor => p_actor, p_data => v_data);
    moved_from := v_was;
    RETURN NEXT;
END
$$;
