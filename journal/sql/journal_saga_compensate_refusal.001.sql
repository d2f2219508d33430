-- Why a person may not have the task compensate now, as the sentence the pages show and
-- journal_saga_compensate raises; NULL when they may (docs/design.md §7). A saga compensates
-- while it is under way, held or handed over; a task that is not a saga only while it needs a
-- person and holds an effect that can be undone (a late effect a person corrected); and a task
-- that ended never runs again, to compensate or for anything else.
CREATE OR REPLACE FUNCTION journal_saga_compensate_refusal(p_task uuid)
RETURNS text
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_task journal_task;
BEGIN
    SELECT * INTO v_task FROM journal_task t WHERE t.id = p_task;
    IF NOT FOUND THEN
        RETURN format('there is no task %s', p_task);
    END IF;
    IF v_task.ended_as <> '' THEN
        RETURN format('task %s is over (it ended %s) and never runs again',
                      p_task, (SELECT s.label FROM journal_status s WHERE s.status = v_task.ended_as));
    END IF;
    IF v_task.plan <> '[]'::jsonb THEN
        RETURN NULL;
    END IF;
    IF v_task.status <> 'needs_human' THEN
        RETURN format('task %s is not a saga: its effects are undone only while it needs a person', p_task);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM journal_step s
                    WHERE s.task_id = p_task AND s.state = 'done' AND s.offset_by_id IS NULL
                      AND s.offsets_id IS NULL AND s.undo_tool <> '') THEN
        RETURN format('task %s holds no done effect that can be undone', p_task);
    END IF;
    RETURN NULL;
END
$$;
