-- A provider's report that names a step but does not fit it (docs/design.md §5): another kind
-- of event than its tool's, another amount, currency or object. Recorded beside the note of
-- what was received (p_notes: journal_step_notes), and the task handed to a person, whatever
-- its status; the step is left as it was (journal_step_conflicted). With no lease: the task's
-- row is locked and its version bumped, so its runner reads it again.
CREATE OR REPLACE FUNCTION journal_step_conflict(
    p_step bigint, p_reason text, p_via text, p_actor text DEFAULT '',
    p_facts jsonb DEFAULT '{}'::jsonb, p_notes jsonb DEFAULT NULL)
RETURNS void
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
    IF p_notes IS NOT NULL THEN
        PERFORM journal_step_notes(p_task => v_task, p_step => p_step, p_notes => p_notes);
    END IF;
    PERFORM journal_step_conflicted(p_step => p_step, p_task => v_task, p_reason => p_reason,
                                    p_via => p_via, p_actor => p_actor, p_facts => p_facts);
END
$$;
