-- The approval a person decides on, locked with its task (docs/design.md §7): refused
-- (SQLSTATE AO001, the sentence to show) when the task has no such approval, or nothing waits
-- for a decision. Not a move of its own: journal_approval_approve and _reject ask it.
CREATE OR REPLACE FUNCTION journal_approval_awaiting(p_task uuid, p_approval bigint)
RETURNS journal_approval
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_status text;
    v_approval journal_approval;
BEGIN
    SELECT t.status INTO v_status FROM journal_task t WHERE t.id = p_task FOR UPDATE;
    SELECT * INTO v_approval FROM journal_approval a
     WHERE a.id = p_approval AND a.task_id = p_task FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION '%', format('task %s has no approval %s', p_task, p_approval)
            USING ERRCODE = 'AO001';
    END IF;
    IF v_status IS DISTINCT FROM 'awaiting_approval' OR v_approval.state <> 'pending' THEN
        RAISE EXCEPTION '%', format(
            'approval %s is %s and the task is %s: there is nothing to decide', p_approval,
            v_approval.state, (SELECT s.label FROM journal_status s WHERE s.status = v_status))
            USING ERRCODE = 'AO001';
    END IF;
    RETURN v_approval;
END
$$;
