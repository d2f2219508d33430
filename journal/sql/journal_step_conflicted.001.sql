-- A report about a step that contradicts the journal or does not fit the step (docs/design.md
-- §5): recorded, and the task handed to a person whatever its status, ended ones included;
-- the step keeps its state. Not a move of its own: journal_step_settle calls it when a
-- report contradicts a settled step, journal_step_conflict when one does not fit its step.
CREATE OR REPLACE FUNCTION journal_step_conflicted(
    p_step bigint, p_task uuid, p_reason text, p_via text, p_actor text DEFAULT '',
    p_facts jsonb DEFAULT '{}'::jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    PERFORM journal_entry_add(
        p_task => p_task, p_step => p_step, p_kind => 'conflict', p_actor => p_actor,
        p_data => jsonb_build_object(
            'kept', (SELECT s.state FROM journal_step s WHERE s.id = p_step AND s.task_id = p_task),
            'via', p_via, 'reason', p_reason) || COALESCE(p_facts, '{}'::jsonb));
    PERFORM 1 FROM journal_transition(
        p_task => p_task, p_to => 'needs_human', p_from => ARRAY(SELECT s.status FROM journal_status s),
        p_code => 'conflict', p_reason => p_reason, p_step => p_step, p_actor => p_actor);
END
$$;
