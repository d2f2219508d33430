-- A person's decision about what happened to a step (journal_step_resolve, journal_step_correct),
-- applied by a worker (docs/design.md §4: the web server's role records people's decisions and
-- settles no step). Asked again under the task's lock, as the person was asked: a step settled
-- meanwhile (a provider's report came first), or a task that moved on, leaves the decision
-- unapplied, saying why. Applied once; returns what it did, in a sentence.
--
-- resolve: the open step settled as the person found it, as a person's word (via operator):
-- an undo settled so frees no object (journal_step_settle). correct: a step of its own, the
-- same tool, arguments and object as the step it corrects, settled done with the evidence
-- they found, its decision naming that step; the guards count it from then on; the task stays
-- with the person, its attention saying what was corrected.
CREATE OR REPLACE FUNCTION journal_decision_apply(p_decision bigint)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_decision journal_decision;
    v_task journal_task;
    v_step journal_step;
    v_refused text;
    v_result text;
    v_detail text;
    v_outcome jsonb;
    v_n integer;
    v_id bigint;
    v_key text;
BEGIN
    SELECT * INTO v_task FROM journal_task t
     WHERE t.id = (SELECT d.task_id FROM journal_decision d WHERE d.id = p_decision) FOR UPDATE;
    SELECT * INTO v_decision FROM journal_decision d
     WHERE d.id = p_decision AND d.applied_at IS NULL FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'applied already, or never decided';
    END IF;
    SELECT * INTO v_step FROM journal_step s
     WHERE s.id = v_decision.step_id AND s.task_id = v_decision.task_id;
    IF v_decision.action = 'resolve' THEN
        IF v_step.state NOT IN ('pending', 'unknown') OR v_task.status <> 'needs_human' THEN
            v_result := format('not applied: step %s is %s and its task is %s by now',
                               v_step.key, v_step.state, v_task.status);
        ELSE
            IF v_decision.state = 'done' THEN
                v_detail := v_decision.reason;
                v_outcome := jsonb_build_object('evidence', v_decision.evidence);
            ELSE
                v_detail := format('settled by hand by %s: %s', v_decision.actor, v_decision.reason);
                v_outcome := jsonb_build_object('resolved_by', v_decision.actor);
            END IF;
            UPDATE journal_task t SET version = t.version + 1 WHERE t.id = v_task.id;
            PERFORM 1 FROM journal_step_settle(
                p_step => v_step.id, p_task => v_task.id, p_task_status => v_task.status,
                p_state => v_decision.state, p_detail => v_detail, p_outcome => v_outcome,
                p_entry => jsonb_build_object('state', v_decision.state, 'via', 'operator',
                                              'detail', v_detail, 'decision', p_decision) || v_outcome,
                p_via => 'operator', p_actor => v_decision.actor);
            v_result := format('settled %s by hand', v_decision.state);
        END IF;
    ELSE
        v_refused := journal_step_correct_refusal(p_step => v_step.id);
        IF v_refused IS NOT NULL THEN
            v_result := 'not applied: ' || v_refused;
        ELSE
            UPDATE journal_task t SET step_count = t.step_count + 1, version = t.version + 1
             WHERE t.id = v_task.id RETURNING t.step_count INTO v_n;
            v_key := journal_step_key(p_task => v_task.id, p_n => v_n);
            v_detail := format('step %s happened after all, corrected by %s: %s', v_step.n,
                               v_decision.actor, v_decision.reason);
            BEGIN
                INSERT INTO journal_step (
                    task_id, n, kind, tool, args, key, cost, guard, guard_key, once, retries,
                    undo_tool, refusal, state, detail, outcome, attempts, lookups,
                    first_started_at, key_trusted_until, lookup_until, settled_at, decision,
                    created_at)
                VALUES (
                    v_task.id, v_n, 'call', v_step.tool, v_step.args, v_key, v_step.cost,
                    v_step.guard, v_step.guard_key, v_step.once, 0, v_step.undo_tool, '', 'done',
                    v_detail, jsonb_build_object('evidence', v_decision.evidence), 0, 0, NULL,
                    NULL, NULL, now(),
                    jsonb_build_object('harness', 'correction', 'of', v_step.n), now())
                RETURNING id INTO v_id;
            EXCEPTION WHEN unique_violation THEN
                v_id := NULL;
            END;
            IF v_id IS NULL THEN
                UPDATE journal_task t SET step_count = t.step_count - 1 WHERE t.id = v_task.id;
                v_result := format('not applied: another %s on %s stands in the journal by now',
                                   v_step.tool, COALESCE(v_step.guard, 'its object'));
            ELSE
                PERFORM journal_entry_add(
                    p_task => v_task.id, p_step => v_id, p_kind => 'step_recorded',
                    p_actor => v_decision.actor,
                    p_data => jsonb_build_object('key', v_key, 'correction_of', v_step.n,
                                                 'decision', p_decision));
                PERFORM journal_entry_add(
                    p_task => v_task.id, p_step => v_id, p_kind => 'step_settled',
                    p_actor => v_decision.actor,
                    p_data => jsonb_build_object('state', 'done', 'via', 'operator',
                                                 'detail', v_detail,
                                                 'evidence', v_decision.evidence));
                PERFORM 1 FROM journal_transition(
                    p_task => v_task.id, p_to => 'needs_human', p_from => ARRAY['needs_human'],
                    p_actor => v_decision.actor, p_step => v_id,
                    p_code => COALESCE(NULLIF(v_task.attention_code, ''), 'conflict'),
                    p_reason => format(
                        'step %s (%s) happened after all (%s): %s corrected it as step %s. %s',
                        v_step.n, v_step.tool, COALESCE(NULLIF(v_decision.label, ''), 'evidence given'),
                        v_decision.actor, v_n,
                        CASE WHEN v_task.ended_as = ''
                             THEN 'Compensate to undo it, or resume the task to go on with it'
                             ELSE format('The task ended %s and runs no more: undo it at the '
                                         'provider if it should not stand, then resume the '
                                         'task, which goes back to %s', v_task.ended_as,
                                         v_task.ended_as) END));
                v_result := format('corrected as step %s', v_n);
            END IF;
        END IF;
    END IF;
    IF v_result LIKE 'not applied:%' THEN
        PERFORM journal_entry_add(
            p_task => v_task.id, p_step => v_step.id, p_kind => 'operator_action',
            p_actor => v_decision.actor,
            p_data => jsonb_build_object('action', 'decision not applied', 'decision', p_decision,
                                         'reason', v_result));
    END IF;
    UPDATE journal_decision d SET applied_at = now(), result = v_result WHERE d.id = p_decision;
    RETURN v_result;
END
$$;
