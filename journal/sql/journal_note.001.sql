-- A note on a task by someone outside the journal's own moves (docs/design.md §4, §8): what a
-- person or an app did beside the task and wants its history to say (a customer's card
-- refused on the payment page, a payment tried again by an operator, an audit finding
-- resolved). Only as an operator_action whose action is none of the journal's own (those are
-- written only by the moves that make them: resume, cancel, compensate, reconcile, resolve,
-- correct), optionally about one step of the task. Returns the entry's id.
CREATE OR REPLACE FUNCTION journal_note(
    p_task uuid, p_actor text, p_action text, p_data jsonb DEFAULT '{}'::jsonb,
    p_step bigint DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF COALESCE(p_action, '') = '' OR p_action IN ('resume', 'cancel', 'compensate', 'reconcile',
                                                    'resolve', 'correct') THEN
        RAISE EXCEPTION 'a note names an action of its own, not %', COALESCE(NULLIF(p_action, ''), 'none')
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF jsonb_typeof(p_data) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'a note''s data is an object' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM journal_task t WHERE t.id = p_task) THEN
        RAISE EXCEPTION 'there is no task %', p_task USING ERRCODE = 'foreign_key_violation';
    END IF;
    IF p_step IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM journal_step s WHERE s.id = p_step AND s.task_id = p_task) THEN
        RAISE EXCEPTION 'step % is not a step of task %', p_step, p_task
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN journal_entry_add(
        p_task => p_task, p_step => p_step, p_kind => 'operator_action', p_actor => p_actor,
        p_data => jsonb_build_object('action', p_action) || (p_data - 'action'));
END
$$;
