-- What a provider said about a step that settles nothing (docs/design.md §5): a notification
-- that the effect is not final yet. Written as a note (journal_step_notes) about the step,
-- with no lease; the task's version is bumped, so its runner reads it again.
CREATE OR REPLACE FUNCTION journal_step_noted(p_step bigint, p_notes jsonb)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_task uuid;
BEGIN
    UPDATE journal_task t SET version = t.version + 1
     WHERE t.id = (SELECT s.task_id FROM journal_step s WHERE s.id = p_step)
    RETURNING t.id INTO v_task;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'there is no step %', p_step USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN journal_step_notes(p_task => v_task, p_step => p_step, p_notes => p_notes);
END
$$;
