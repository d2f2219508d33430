-- Why a person may not cancel the task now, as the sentence the pages show beside the button
-- and journal_task_cancel raises; NULL when they may (docs/design.md §7, §8). Only a task that
-- needs a person is cancelled; never while one of its steps may still have acted (nobody
-- would ever find out what happened); a saga is compensated rather than cancelled while an
-- effect that can be undone stands (nothing would undo it); and a task that ended otherwise
-- goes back to how it ended, never to cancelled.
CREATE OR REPLACE FUNCTION journal_task_cancel_refusal(p_task uuid)
RETURNS text
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_task journal_task;
    v_step journal_step;
BEGIN
    SELECT * INTO v_task FROM journal_task t WHERE t.id = p_task;
    IF NOT FOUND THEN
        RETURN format('there is no task %s', p_task);
    END IF;
    IF v_task.status <> 'needs_human' THEN
        RETURN format('task %s is %s; only a task that needs a human can be cancelled',
                      p_task, (SELECT s.label FROM journal_status s WHERE s.status = v_task.status));
    END IF;
    IF v_task.ended_as NOT IN ('', 'cancelled') THEN
        RETURN format('task %s ended %s: it is over, and goes back to %s when resumed',
                      p_task, v_task.ended_as, v_task.ended_as);
    END IF;
    SELECT * INTO v_step FROM journal_step s
     WHERE s.task_id = p_task AND s.state IN ('pending', 'unknown') ORDER BY s.n LIMIT 1;
    IF FOUND THEN
        RETURN format('step %s (%s) is %s: it may have happened; reconcile it or resolve it by '
                      'hand before cancelling the task', v_step.key, v_step.tool, v_step.state);
    END IF;
    IF v_task.plan <> '[]'::jsonb THEN
        SELECT * INTO v_step FROM journal_step s
         WHERE s.task_id = p_task AND s.state = 'done' AND s.offset_by_id IS NULL
           AND s.offsets_id IS NULL AND s.undo_tool <> ''
         ORDER BY s.n DESC LIMIT 1;
        IF FOUND THEN
            RETURN format('step %s (%s) is done and can be undone: compensate the saga rather '
                          'than cancel it, or nothing would ever undo it', v_step.key, v_step.tool);
        END IF;
    END IF;
    RETURN NULL;
END
$$;
