-- A person has open steps looked up at once (docs/design.md §5, §8): by key, retried with the
-- same key only while it is trusted (the runner decides, from each step's record). Their
-- tasks wake: a waiting task becomes runnable, and one handed to a person for such a step
-- goes on. Settled steps, and steps of tasks that are over, held, or that ended, are left
-- alone. Returns the tasks to ring for.
CREATE OR REPLACE FUNCTION journal_steps_reconcile_now(
    p_steps bigint[], p_actor text, p_reason text DEFAULT '')
RETURNS SETOF uuid
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_step record;
    v_woken uuid[] := '{}';
    v_status text;
BEGIN
    FOR v_step IN
        SELECT s.id, s.task_id, s.key FROM journal_step s JOIN journal_task t ON t.id = s.task_id
         WHERE s.id = ANY (p_steps) AND s.state IN ('pending', 'unknown')
           AND t.status NOT IN ('finished', 'cancelled', 'compensated', 'awaiting_approval')
           AND t.ended_as = ''
         ORDER BY s.task_id, s.n
           FOR UPDATE OF s
    LOOP
        UPDATE journal_step s SET next_check_at = now() WHERE s.id = v_step.id;
        UPDATE journal_task t SET version = t.version + 1 WHERE t.id = v_step.task_id
        RETURNING t.status INTO v_status;
        PERFORM journal_entry_add(
            p_task => v_step.task_id, p_step => v_step.id, p_kind => 'operator_action',
            p_actor => p_actor,
            p_data => jsonb_build_object('action', 'reconcile',
                                         'reason', COALESCE(NULLIF(p_reason, ''), 'reconcile now')));
        IF v_step.task_id = ANY (v_woken) THEN
            CONTINUE;
        END IF;
        v_woken := v_woken || v_step.task_id;
        IF v_status IN ('waiting', 'needs_human') THEN
            IF v_status = 'needs_human' THEN
                UPDATE journal_task t SET failed_runs = 0 WHERE t.id = v_step.task_id;
            END IF;
            PERFORM 1 FROM journal_transition(
                p_task => v_step.task_id, p_to => 'runnable', p_from => ARRAY['waiting', 'needs_human'],
                p_actor => p_actor, p_step => v_step.id,
                p_reason => format('reconcile %s now, by %s', v_step.key, p_actor));
        END IF;
        RETURN NEXT v_step.task_id;
    END LOOP;
END
$$;
