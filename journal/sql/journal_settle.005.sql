-- A step settled done or not_done by what the provider said (docs/design.md §4, §5): by its
-- runner, under its lease (p_task, p_token), from the attempt it made or a lookup; or with no
-- lease, from a provider's notification (the task's row is locked first and its version
-- bumped, so its runner reads it again). journal_step_settle does it: monotone, and a report
-- that contradicts a settled step is a conflict. p_notes are what was seen with it
-- (journal_step_notes). p_settles: a settlement the runner held back, written first
-- (journal_hold). Returns whether the step changed, the task's version before and after, its
-- status, the step's state and key now, and the task's id. No row: the lease was lost, or the
-- step does not exist.
CREATE OR REPLACE FUNCTION journal_settle(
    p_step bigint, p_state text, p_detail text, p_outcome jsonb, p_entry jsonb,
    p_via text DEFAULT '', p_task uuid DEFAULT NULL, p_token bigint DEFAULT NULL,
    p_lease float8 DEFAULT NULL, p_lookups integer DEFAULT 0, p_actor text DEFAULT '',
    p_notes jsonb DEFAULT NULL, p_settles jsonb DEFAULT NULL)
RETURNS TABLE (changed boolean, version_was bigint, task_version bigint, task_status text,
               step_state text, step_key text, step_task uuid, settled text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF p_via = 'operator' THEN
        RAISE EXCEPTION 'a person settles a step by journal_step_resolve, not as a provider''s report'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF p_token IS NOT NULL THEN
        SELECT h.held_status, h.version_was, h.held_version, h.settled
          INTO task_status, version_was, task_version, settled
          FROM journal_hold(p_task => p_task, p_token => p_token, p_lease => p_lease,
                            p_settles => p_settles) h;
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
        version_was := task_version - 1;
    END IF;
    SELECT s.changed, s.step_state, s.step_key INTO changed, step_state, step_key
      FROM journal_step_settle(
          p_step => p_step, p_task => step_task, p_task_status => task_status,
          p_state => p_state, p_detail => p_detail, p_outcome => p_outcome, p_entry => p_entry,
          p_via => p_via, p_actor => p_actor, p_lookups => p_lookups, p_notes => p_notes,
          p_attempt => p_token IS NOT NULL) s;
    SELECT t.version, t.status INTO task_version, task_status FROM journal_task t WHERE t.id = step_task;
    RETURN NEXT;
END
$$;
