-- A person corrects the journal about a step that was settled not_done but happened after all,
-- as a later report showed (docs/design.md §7, §8): a charge that landed after its step was
-- settled by hand and the task cancelled. A settled step never changes, so the correction is
-- a step of its own: the same tool, arguments and object, settled done with the evidence the
-- person gives, its decision naming the step it corrects. From then on it stands like any effect: the guards count it (a paid
-- invoice is not charged again), and a task that has not ended can be compensated to undo it.
-- Refused (SQLSTATE AO001, nothing written) where journal_step_correct_refusal says why, when
-- there is no evidence (which names the tool declares is the caller's to check: its tools
-- are Python's), and when the guards refuse it (another effect on its object stands).
-- The task stays with the person, its attention saying what was corrected; a task that ended
-- goes back to how it ended when resumed. p_label names the evidence in that sentence.
-- Returns the correction's id.
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
    v_task journal_task;
    v_refused text;
    v_n integer;
    v_id bigint;
    v_key text;
    v_detail text;
BEGIN
    IF COALESCE(p_actor, '') = '' THEN
        RAISE EXCEPTION 'say who corrects: the journal records it' USING ERRCODE = 'AO001';
    END IF;
    SELECT * INTO v_task FROM journal_task t
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
    UPDATE journal_task t SET step_count = t.step_count + 1, version = t.version + 1
     WHERE t.id = v_task.id RETURNING t.step_count INTO v_n;
    v_key := journal_step_key(p_task => v_task.id, p_n => v_n);
    v_detail := format('step %s happened after all, corrected by %s: %s', v_step.n, p_actor, v_why);
    BEGIN
        INSERT INTO journal_step (
            task_id, n, kind, tool, args, key, cost, guard, guard_key, once, retries, undo_tool,
            refusal, state, detail, outcome, attempts, lookups, first_started_at,
            key_trusted_until, lookup_until, settled_at, decision, created_at)
        VALUES (
            v_task.id, v_n, 'call', v_step.tool, v_step.args, v_key, v_step.cost, v_step.guard,
            v_step.guard_key, v_step.once, 0, v_step.undo_tool, '', 'done', v_detail,
            jsonb_build_object('evidence', p_evidence), 0, 0, NULL, NULL, NULL, now(),
            jsonb_build_object('harness', 'correction', 'of', v_step.n), now())
        RETURNING id INTO v_id;
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION '%', format(
            'the correction cannot be recorded: another %s on %s stands in the journal; settle '
            'or undo that one first', v_step.tool, COALESCE(v_step.guard, 'its object'))
            USING ERRCODE = 'AO001';
    END;
    PERFORM journal_entry_add(
        p_task => v_task.id, p_step => v_id, p_kind => 'step_recorded', p_actor => p_actor,
        p_data => jsonb_build_object('key', v_key, 'correction_of', v_step.n));
    PERFORM journal_entry_add(
        p_task => v_task.id, p_step => v_id, p_kind => 'step_settled', p_actor => p_actor,
        p_data => jsonb_build_object('state', 'done', 'via', 'operator', 'detail', v_detail,
                                     'evidence', p_evidence));
    PERFORM journal_entry_add(
        p_task => v_task.id, p_step => p_step, p_kind => 'operator_action', p_actor => p_actor,
        p_data => jsonb_build_object('action', 'correct', 'reason', v_why, 'evidence', p_evidence,
                                     'correction', v_n, 'was', v_task.attention_code));
    PERFORM 1 FROM journal_transition(
        p_task => v_task.id, p_to => 'needs_human', p_from => ARRAY['needs_human'],
        p_actor => p_actor, p_step => v_id,
        p_code => COALESCE(NULLIF(v_task.attention_code, ''), 'conflict'),
        p_reason => format('step %s (%s) happened after all (%s): %s corrected it as step %s. %s',
                           v_step.n, v_step.tool, COALESCE(NULLIF(p_label, ''), 'evidence given'),
                           p_actor, v_n,
                           CASE WHEN v_task.ended_as = ''
                                THEN 'Compensate to undo it, or resume the task to go on with it'
                                ELSE format('The task ended %s and runs no more: undo it at the '
                                            'provider if it should not stand, then resume the '
                                            'task, which goes back to %s', v_task.ended_as,
                                            v_task.ended_as) END));
    RETURN v_id;
END
$$;
