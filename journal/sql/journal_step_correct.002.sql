-- A person corrects the journal about a step that was settled not_done but happened after all,
-- as a later report showed (docs/design.md §7, §8): a charge that landed after its step was
-- settled by hand and the task cancelled. Recorded here, by what faces the network (its role
-- records no effect), with who, why and the evidence they found; a worker applies it
-- (journal_decision_apply), asking again whether it still may, as a step of its own: the same
-- tool, arguments and object, settled done with that evidence, its decision naming the step
-- it corrects. Refused (SQLSTATE AO001, nothing written) where journal_step_correct_refusal
-- says why, when there is no evidence (which names the tool declares is the caller's to
-- check: its tools are Python's), and when the guards would refuse it (another effect on its
-- object stands). p_label names the evidence in the sentences. Returns the decision's id.
CREATE OR REPLACE FUNCTION journal_step_correct(
    p_step bigint, p_actor text, p_evidence jsonb, p_reason text, p_label text DEFAULT '')
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_why text := journal_person_reason(p_reason => p_reason);
    v_step journal_step;
    v_refused text;
    v_decision bigint;
BEGIN
    IF COALESCE(p_actor, '') = '' THEN
        RAISE EXCEPTION 'say who corrects: the journal records it' USING ERRCODE = 'AO001';
    END IF;
    PERFORM 1 FROM journal_task t
     WHERE t.id = (SELECT s.task_id FROM journal_step s WHERE s.id = p_step) FOR UPDATE;
    v_refused := journal_step_correct_refusal(p_step => p_step);
    IF v_refused IS NOT NULL THEN
        RAISE EXCEPTION '%', v_refused USING ERRCODE = 'AO001';
    END IF;
    SELECT * INTO v_step FROM journal_step s WHERE s.id = p_step;
    IF jsonb_typeof(p_evidence) IS DISTINCT FROM 'object' OR p_evidence = '{}'::jsonb THEN
        RAISE EXCEPTION '%', format('give the evidence of the effect you found at the provider (a done %s carries it)',
                                    v_step.tool)
            USING ERRCODE = 'AO001';
    END IF;
    IF v_step.once AND EXISTS (SELECT 1 FROM journal_object_once o WHERE o.guard_key = v_step.guard_key) THEN
        RAISE EXCEPTION '%', format(
            'the correction cannot be recorded: another %s on %s stands in the journal; settle '
            'or undo that one first', v_step.tool, COALESCE(v_step.guard, 'its object'))
            USING ERRCODE = 'AO001';
    END IF;
    INSERT INTO journal_decision (task_id, step_id, action, state, evidence, label, reason, actor,
                                  decided_at, result)
    VALUES (v_step.task_id, p_step, 'correct', 'done', p_evidence, left(COALESCE(p_label, ''), 200),
            v_why, p_actor, now(), '')
    RETURNING id INTO v_decision;
    UPDATE journal_task t SET version = t.version + 1 WHERE t.id = v_step.task_id;
    PERFORM journal_entry_add(
        p_task => v_step.task_id, p_step => p_step, p_kind => 'operator_action', p_actor => p_actor,
        p_data => jsonb_build_object('action', 'correct', 'reason', v_why, 'evidence', p_evidence,
                                     'decision', v_decision));
    RETURN v_decision;
END
$$;
