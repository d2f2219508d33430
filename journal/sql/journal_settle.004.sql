-- Settling a step done or not_done (docs/design.md §4, §5): the one place it happens, for the
-- runner (under its lease: p_task and p_token) and for lookups, webhooks and people (no
-- lease: the task's row is locked first, and its version bumped so its runner reads it
-- again). Monotone: only an open step (pending or unknown) changes. p_extra entries are
-- written first, whether or not the step changed (the attempt that ran, the lookup made);
-- then, if it changed, one step_settled entry (p_entry). A done undo marks the step it
-- undoes as offset. A task that was waiting for the step is woken. Returns whether the
-- step changed, the task's version and status as found, and the step's state and key now
-- (a caller that changed nothing tells a repeat from a contradiction). No row: the lease
-- was lost, or the step does not exist. p_fenced: the caller fenced the lease of the
-- runnable task in this very statement already, and this is the version its fence took
-- (journal_settle_record, the one caller that passes it): the task's row is locked by this
-- transaction until it commits, so it is neither read nor written again.
CREATE OR REPLACE FUNCTION journal_settle(
    p_step bigint, p_state text, p_detail text, p_outcome jsonb, p_entry jsonb,
    p_via text DEFAULT '', p_task uuid DEFAULT NULL, p_token bigint DEFAULT NULL,
    p_lease float8 DEFAULT NULL, p_lookups integer DEFAULT 0, p_actor text DEFAULT '',
    p_extra jsonb DEFAULT '[]'::jsonb, p_fenced bigint DEFAULT NULL)
RETURNS TABLE (changed boolean, task_version bigint, task_status text, step_state text,
               step_key text, step_task uuid)
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_offsets bigint;
    v_entry bigint;
BEGIN
    IF p_state NOT IN ('done', 'not_done') THEN
        RAISE EXCEPTION 'journal_settle takes done or not_done, not %', p_state;
    END IF;
    IF p_fenced IS NOT NULL THEN
        task_status := 'runnable';
        task_version := p_fenced;
        step_task := p_task;
    ELSIF p_token IS NOT NULL THEN
        SELECT f.fenced_status, f.fenced_version INTO task_status, task_version
          FROM journal_fence(p_task => p_task, p_token => p_token, p_lease => p_lease) AS f;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        step_task := p_task;
    ELSE
        UPDATE journal_task t SET version = t.version + 1
         WHERE t.id = (SELECT s.task_id FROM journal_step s WHERE s.id = p_step)
        RETURNING t.id, t.status, t.version INTO step_task, task_status, task_version;
        IF NOT FOUND THEN
            RETURN;
        END IF;
    END IF;
    IF COALESCE(p_extra, '[]'::jsonb) <> '[]'::jsonb THEN
        PERFORM journal_entries_add(p_entries => p_extra);
    END IF;
    UPDATE journal_step s
       SET state = p_state, detail = p_detail, outcome = p_outcome, settled_at = now(),
           next_check_at = NULL, lookups = s.lookups + p_lookups
     WHERE s.id = p_step AND s.task_id = step_task AND s.state IN ('pending', 'unknown')
    RETURNING s.offsets_id, s.key INTO v_offsets, step_key;
    changed := FOUND;
    IF changed THEN
        step_state := p_state;
        v_entry := journal_entry_add(
            p_task => step_task, p_step => p_step, p_kind => 'step_settled',
            p_actor => p_actor, p_data => p_entry);
        IF v_offsets IS NOT NULL AND p_state = 'done' THEN
            UPDATE journal_step s SET offset_by_id = p_step
             WHERE s.id = v_offsets AND s.offset_by_id IS NULL;
        END IF;
        IF task_status = 'waiting' THEN
            PERFORM 1 FROM journal_transition(
                p_task => step_task, p_to => 'runnable', p_from => ARRAY['waiting'],
                p_step => p_step, p_actor => p_actor,
                p_reason => 'step ' || step_key || ' settled ' || p_state
                            || CASE WHEN p_via <> '' THEN ' (' || p_via || ')' ELSE '' END);
        END IF;
    ELSE
        SELECT s.state, s.key INTO step_state, step_key FROM journal_step s WHERE s.id = p_step;
    END IF;
    RETURN NEXT;
END
$$;
