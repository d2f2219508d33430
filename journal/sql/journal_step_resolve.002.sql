-- A person decides what happened to a step nobody can settle automatically (docs/design.md §5,
-- §8): its task needs a person and the step is still open. Done with the evidence they found
-- at the provider (a charge id, a message id), or not done with the reason. Recorded here, by
-- what faces the network (its role settles no step), with who and why; a worker applies it
-- (journal_decision_apply), asking again whether it still may. Refused (SQLSTATE AO001, the
-- sentence to show, nothing written) otherwise. Returns the decision's id.
CREATE OR REPLACE FUNCTION journal_step_resolve(
    p_step bigint, p_actor text, p_done boolean, p_evidence text DEFAULT '',
    p_reason text DEFAULT '')
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_why text := journal_person_reason(p_reason => p_reason);
    v_evidence text := left(btrim(COALESCE(p_evidence, '')), 200);
    v_step journal_step;
    v_status text;
    v_state text := CASE WHEN p_done THEN 'done' ELSE 'not_done' END;
    v_decision bigint;
BEGIN
    IF COALESCE(p_actor, '') = '' THEN
        RAISE EXCEPTION 'say who settles it: the journal records it' USING ERRCODE = 'AO001';
    END IF;
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
    INSERT INTO journal_decision (task_id, step_id, action, state, evidence, label, reason, actor,
                                  decided_at, result)
    VALUES (v_step.task_id, p_step, 'resolve', v_state,
            CASE WHEN p_done THEN jsonb_build_object('reference', v_evidence, 'resolved_by', p_actor)
                 ELSE '{}'::jsonb END,
            v_evidence, v_why, p_actor, now(), '')
    RETURNING id INTO v_decision;
    UPDATE journal_task t SET version = t.version + 1 WHERE t.id = v_step.task_id;
    PERFORM journal_entry_add(
        p_task => v_step.task_id, p_step => p_step, p_kind => 'operator_action', p_actor => p_actor,
        p_data => jsonb_build_object('action', 'resolve', 'state', v_state, 'reason', v_why,
                                     'evidence', v_evidence, 'decision', v_decision));
    RETURN v_decision;
END
$$;
