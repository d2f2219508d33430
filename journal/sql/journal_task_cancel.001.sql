-- A person stops a task that needs one (docs/design.md §7, §8), with who and why. Refused
-- (SQLSTATE AO001, nothing written) where journal_task_cancel_refusal says why.
CREATE OR REPLACE FUNCTION journal_task_cancel(p_task uuid, p_actor text, p_reason text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_why text := journal_person_reason(p_reason => p_reason);
    v_code text;
    v_refused text;
BEGIN
    SELECT t.attention_code INTO v_code FROM journal_task t WHERE t.id = p_task FOR UPDATE;
    v_refused := journal_task_cancel_refusal(p_task => p_task);
    IF v_refused IS NOT NULL THEN
        RAISE EXCEPTION '%', v_refused USING ERRCODE = 'AO001';
    END IF;
    PERFORM journal_entry_add(
        p_task => p_task, p_step => NULL, p_kind => 'operator_action', p_actor => p_actor,
        p_data => jsonb_build_object('action', 'cancel', 'reason', v_why, 'was', v_code));
    PERFORM 1 FROM journal_transition(
        p_task => p_task, p_to => 'cancelled', p_from => ARRAY['needs_human'], p_actor => p_actor,
        p_reason => format('cancelled by %s: %s', p_actor, v_why));
END
$$;
