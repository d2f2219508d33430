-- A person lets a task that needs one go on (docs/design.md §7, §8), with who and why. A task
-- that had ended (a later report contradicted it) goes back to how it ended: finished means
-- finished. Any other goes back to runnable, its run-failure count cleared, and an unknown
-- step nobody was looking up any more gets one more lookup at once. Refused (SQLSTATE AO001,
-- the sentence to show, nothing written) unless the task needs a person. Returns its status
-- now.
CREATE OR REPLACE FUNCTION journal_task_resume(p_task uuid, p_actor text, p_reason text)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_why text := journal_person_reason(p_reason => p_reason);
    v_task journal_task;
    v_to text;
BEGIN
    SELECT * INTO v_task FROM journal_task t WHERE t.id = p_task FOR UPDATE;
    IF NOT FOUND OR v_task.status <> 'needs_human' THEN
        RAISE EXCEPTION '%', format('task %s is %s; only a task that needs a human can be resumed',
                                    p_task, COALESCE((SELECT s.label FROM journal_status s
                                                       WHERE s.status = v_task.status), 'unknown'))
            USING ERRCODE = 'AO001';
    END IF;
    v_to := COALESCE(NULLIF(v_task.ended_as, ''), 'runnable');
    IF v_to = 'runnable' THEN
        UPDATE journal_task t SET failed_runs = 0 WHERE t.id = p_task;
        UPDATE journal_step s SET next_check_at = now()
         WHERE s.task_id = p_task AND s.state = 'unknown' AND s.next_check_at IS NULL;
    END IF;
    PERFORM journal_entry_add(
        p_task => p_task, p_step => NULL, p_kind => 'operator_action', p_actor => p_actor,
        p_data => jsonb_build_object('action', 'resume', 'reason', v_why,
                                     'was', v_task.attention_code));
    PERFORM 1 FROM journal_transition(
        p_task => p_task, p_to => v_to, p_from => ARRAY['needs_human'], p_actor => p_actor,
        p_reason => format('resumed by %s: %s', p_actor, v_why));
    RETURN v_to;
END
$$;
