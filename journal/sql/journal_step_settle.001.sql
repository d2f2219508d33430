-- Settling a step done or not_done (docs/design.md §4, §5): the one place it happens. Not a
-- move of its own: the moves that settle (journal_settle for the runner, a lookup and a
-- provider's notification; journal_hold for the settlement a runner held back; a person's
-- journal_step_resolve) lock the task's row first and pass its status (p_task_status).
--
-- Monotone: only an open step (pending or unknown) of p_task changes, and a done one carries
-- its evidence (a not_done one may too: the provider's id of what it refused). p_notes (journal_step_notes) are written first, whether or not it changed
-- (the lookup made, the notification received); then, if it changed, one step_settled entry
-- (p_entry). A done undo marks the step it undoes as undone, so that the object's once-only
-- effect may happen again: only when the undo's evidence came from the provider (an attempt,
-- a lookup, a notification), never from a person's word (p_via 'operator'). A task waiting
-- for the step is woken. When the step had settled already: p_attempt notes the attempt that
-- ran regardless; a report that contradicts it is a conflict (journal_step_conflicted), and
-- the step keeps its outcome. Returns whether it changed, and the step's state and key now.
CREATE OR REPLACE FUNCTION journal_step_settle(
    p_step bigint, p_task uuid, p_task_status text, p_state text, p_detail text,
    p_outcome jsonb, p_entry jsonb, p_via text, p_actor text DEFAULT '',
    p_lookups integer DEFAULT 0, p_notes jsonb DEFAULT NULL, p_attempt boolean DEFAULT false)
RETURNS TABLE (changed boolean, step_state text, step_key text)
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_offsets bigint;
BEGIN
    IF p_state IS NULL OR p_state NOT IN ('done', 'not_done') THEN
        RAISE EXCEPTION 'a step settles done or not_done, not %', p_state
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF jsonb_typeof(p_outcome) IS DISTINCT FROM 'object'
       OR (p_state = 'done' AND jsonb_typeof(p_outcome->'evidence') IS DISTINCT FROM 'object') THEN
        RAISE EXCEPTION 'step %: a done step carries its evidence', p_step
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_notes IS NOT NULL THEN
        PERFORM journal_step_notes(p_task => p_task, p_step => p_step, p_notes => p_notes);
    END IF;
    UPDATE journal_step s
       SET state = p_state, detail = p_detail, outcome = p_outcome, settled_at = now(),
           next_check_at = NULL, lookups = s.lookups + GREATEST(p_lookups, 0)
     WHERE s.id = p_step AND s.task_id = p_task AND s.state IN ('pending', 'unknown')
    RETURNING s.offsets_id, s.key INTO v_offsets, step_key;
    changed := FOUND;
    IF changed THEN
        step_state := p_state;
        PERFORM journal_entry_add(
            p_task => p_task, p_step => p_step, p_kind => 'step_settled', p_actor => p_actor,
            p_data => COALESCE(p_entry, '{}'::jsonb));
        IF v_offsets IS NOT NULL AND p_state = 'done' AND p_via <> 'operator' THEN
            UPDATE journal_step s SET offset_by_id = p_step
             WHERE s.id = v_offsets AND s.offset_by_id IS NULL AND s.state = 'done';
        END IF;
        IF p_task_status = 'waiting' THEN
            PERFORM 1 FROM journal_transition(
                p_task => p_task, p_to => 'runnable', p_from => ARRAY['waiting'],
                p_step => p_step, p_actor => p_actor,
                p_reason => 'step ' || step_key || ' settled ' || p_state
                            || CASE WHEN p_via <> '' THEN ' (' || p_via || ')' ELSE '' END);
        END IF;
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT s.state, s.key INTO step_state, step_key
      FROM journal_step s WHERE s.id = p_step AND s.task_id = p_task;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'step % is not a step of task %', p_step, p_task
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    IF p_attempt AND p_entry ? 'attempt' THEN
        -- The runner's attempt ran although the step had settled: its facts stand alone.
        PERFORM journal_entry_add(
            p_task => p_task, p_step => p_step, p_kind => 'attempt_ended', p_actor => '',
            p_data => (SELECT COALESCE(jsonb_object_agg(e.key, e.value), '{}'::jsonb)
                         FROM jsonb_each(p_entry) e
                        WHERE e.key IN ('attempt', 'observed', 'error_class', 'status', 'code',
                                        'classified')));
    END IF;
    IF step_state IN ('done', 'not_done') AND step_state <> p_state THEN
        PERFORM journal_step_conflicted(
            p_step => p_step, p_task => p_task, p_via => p_via, p_actor => p_actor,
            p_reason => format('step %s is settled %s but %s reports %s: %s',
                               step_key, step_state, p_via, p_state, p_detail),
            p_facts => jsonb_build_object('reported', p_state) || p_outcome);
    END IF;
    changed := false;
    RETURN NEXT;
END
$$;
