-- Tasks waiting on another task's effect wake once it settled (docs/design.md §6, §7): each
-- task waiting whose last step the guard refused because the step keyed p_key was in flight
-- or unknown (its outcome's refused_by) becomes runnable now, instead of at its backed-off
-- wake-up time, which may be the longest lookup delay away while a person held that step.
-- Nothing while that step is still open: asked again, they would be refused again. Woken,
-- a task decides as it would at its time (already done: refused with the evidence; not done:
-- it goes ahead). Found by the object's guard (the steps' guard_key index). Returns the tasks
-- woken, to ring for.
CREATE OR REPLACE FUNCTION journal_waiters_wake(p_key text, p_actor text)
RETURNS SETOF uuid
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_holder journal_step;
    v_waiter record;
BEGIN
    SELECT * INTO v_holder FROM journal_step s WHERE s.key = p_key;
    IF NOT FOUND OR v_holder.guard_key IS NULL OR v_holder.state IN ('pending', 'unknown') THEN
        RETURN;
    END IF;
    FOR v_waiter IN
        SELECT t.id, s.id AS step FROM journal_step s
          JOIN journal_task t ON t.id = s.task_id
         WHERE s.guard_key = v_holder.guard_key AND s.task_id <> v_holder.task_id
           AND s.refusal = 'in_flight' AND s.outcome ->> 'refused_by' = p_key
           AND t.status = 'waiting' AND t.step_count = s.n
         ORDER BY t.id
           FOR UPDATE OF t
    LOOP
        PERFORM 1 FROM journal_transition(
            p_task => v_waiter.id, p_to => 'runnable', p_from => ARRAY['waiting'],
            p_actor => p_actor, p_step => v_waiter.step,
            p_reason => format('step %s, which it waited for, settled', p_key));
        RETURN NEXT v_waiter.id;
    END LOOP;
END
$$;
