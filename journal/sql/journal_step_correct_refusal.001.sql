-- Why a person may not correct the step now, as the sentence the pages show and
-- journal_step_correct raises; NULL when they may (docs/design.md §7, §8): only a step that was
-- settled not_done after it was sent (a refused step never left), of a task that needs a
-- person and is not unwinding (an unwinding saga records nothing but undos), and once.
CREATE OR REPLACE FUNCTION journal_step_correct_refusal(p_step bigint)
RETURNS text
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_step journal_step;
    v_task journal_task;
    v_by integer;
BEGIN
    SELECT * INTO v_step FROM journal_step s WHERE s.id = p_step;
    IF NOT FOUND THEN
        RETURN format('there is no step %s', p_step);
    END IF;
    SELECT * INTO v_task FROM journal_task t WHERE t.id = v_step.task_id;
    IF v_task.status <> 'needs_human' THEN
        RETURN format('task %s is %s: only a task that needs a person is corrected', v_task.id,
                      (SELECT s.label FROM journal_status s WHERE s.status = v_task.status));
    END IF;
    IF v_step.kind <> 'call' OR v_step.state <> 'not_done' THEN
        RETURN format('step %s is %s: only a step settled not done is corrected', v_step.key, v_step.state);
    END IF;
    IF v_step.refusal <> '' THEN
        RETURN format('step %s was refused (%s) and never sent: it cannot have happened',
                      v_step.key, v_step.refusal);
    END IF;
    IF v_task.unwinding THEN
        RETURN format('task %s is unwinding and records nothing but undos: undo the effect of '
                      'step %s at the provider, then resume', v_task.id, v_step.key);
    END IF;
    SELECT s.n INTO v_by FROM journal_step s
     WHERE s.task_id = v_step.task_id AND s.decision->>'harness' = 'correction'
       AND s.decision->'of' = to_jsonb(v_step.n)
     LIMIT 1;
    IF FOUND THEN
        RETURN format('step %s was corrected already, as step %s', v_step.key, v_by);
    END IF;
    RETURN NULL;
END
$$;
