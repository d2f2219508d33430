-- A person has a task compensate now (docs/design.md §7): from now on its done effects are
-- undone, newest first, each by the undo it declared, and no step goes forward. Refused
-- (SQLSTATE AO001, nothing written) where journal_saga_compensate_refusal says why. A pending
-- approval is rejected instead; a task that was held or handed over goes on, compensating.
CREATE OR REPLACE FUNCTION journal_saga_compensate(p_task uuid, p_actor text, p_reason text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_why text := journal_person_reason(p_reason => p_reason);
    v_status text;
    v_refused text;
BEGIN
    SELECT t.status INTO v_status FROM journal_task t WHERE t.id = p_task FOR UPDATE;
    v_refused := journal_saga_compensate_refusal(p_task => p_task);
    IF v_refused IS NOT NULL THEN
        RAISE EXCEPTION '%', v_refused USING ERRCODE = 'AO001';
    END IF;
    UPDATE journal_approval a
       SET state = 'rejected', decided_by = p_actor, decided_at = now(),
           decision_reason = 'compensated instead: ' || v_why
     WHERE a.task_id = p_task AND a.state = 'pending';
    PERFORM journal_entry_add(
        p_task => p_task, p_step => NULL, p_kind => 'operator_action', p_actor => p_actor,
        p_data => jsonb_build_object('action', 'compensate', 'reason', v_why, 'was', v_status));
    PERFORM journal_saga_unwound(
        p_task => p_task, p_reason => format('compensated by %s: %s', p_actor, v_why),
        p_actor => p_actor);
    IF v_status IN ('needs_human', 'awaiting_approval') THEN
        UPDATE journal_task t SET failed_runs = 0 WHERE t.id = p_task;
        PERFORM 1 FROM journal_transition(
            p_task => p_task, p_to => 'runnable', p_from => ARRAY['needs_human', 'awaiting_approval'],
            p_actor => p_actor, p_reason => format('compensating, by %s: %s', p_actor, v_why));
    END IF;
END
$$;
