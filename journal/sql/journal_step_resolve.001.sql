-- A person settles by hand a step nobody can settle automatically (docs/design.md §5, §8): its
-- task needs a person and the step is still open. Done with the evidence they found at the
-- provider (a charge id, a message id), or not done with the reason. Settled like any report
-- (journal_step_settle: monotone, and a later contradicting report is a conflict), as the
-- person's (via operator): a person's word is not the provider's, so an undo settled so does
-- not free the object it acted on. The task stays with the person, who resumes it when ready.
-- Refused (SQLSTATE AO001, nothing written) otherwise.
CREATE OR REPLACE FUNCTION journal_step_resolve(
    p_step bigint, p_actor text, p_done boolean, p_evidence text DEFAULT '',
    p_reason text DEFAULT '')
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_why text := journal_person_reason(p_reason => p_reason);
    v_evidence text := left(btrim(COALESCE(p_evidence, '')), 200);
    v_step journal_step;
    v_status text;
    v_state text;
    v_detail text;
    v_outcome jsonb;
BEGIN
    IF p_done AND v_evidence = '' THEN
        RAISE EXCEPTION 'give the evidence you found (a charge or message id)' USING ERRCODE = 'AO001';
    END IF;
    SELECT t.status INTO v_status FROM journal_task t
     WHERE t.id = (SELECT s.task_id FROM journal_step s WHERE s.id = p_step) FOR UPDATE;
    SELECT * INTO v_step FROM journal_step s WHERE s.id = p_step;
    IF NOT FOUND THEN
        RAISE EXCEPTION '%', format('there is no step %s', p_step) USING ERRCODE = 'AO001';
    END IF;
    IF v_step.state NOT IN ('pending', 'unknown') OR v_status <> 'needs_human' THEN
        RAISE EXCEPTION '%', format(
            'step %s is %s and its task is %s: only an open step of a task that needs a person is settled by hand',
            v_step.key, v_step.state, (SELECT s.label FROM journal_status s WHERE s.status = v_status))
            USING ERRCODE = 'AO001';
    END IF;
    IF p_done THEN
        v_state := 'done';
        v_detail := v_why;
        v_outcome := jsonb_build_object('evidence', jsonb_build_object('reference', v_evidence,
                                                                       'resolved_by', p_actor));
    ELSE
        v_state := 'not_done';
        v_detail := format('settled by hand by %s: %s', p_actor, v_why);
        v_outcome := jsonb_build_object('resolved_by', p_actor);
    END IF;
    UPDATE journal_task t SET version = t.version + 1 WHERE t.id = v_step.task_id;
    PERFORM journal_entry_add(
        p_task => v_step.task_id, p_step => p_step, p_kind => 'operator_action', p_actor => p_actor,
        p_data => jsonb_build_object('action', 'resolve', 'state', v_state, 'reason', v_why,
                                     'evidence', v_evidence));
    PERFORM 1 FROM journal_step_settle(
        p_step => p_step, p_task => v_step.task_id, p_task_status => v_status, p_state => v_state,
        p_detail => v_detail, p_outcome => v_outcome,
        p_entry => jsonb_build_object('state', v_state, 'via', 'operator', 'detail', v_detail) || v_outcome,
        p_via => 'operator', p_actor => p_actor);
END
$$;
