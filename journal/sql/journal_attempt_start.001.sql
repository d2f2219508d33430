-- Another attempt of an open step, under its runner's lease (docs/design.md §5): the same key
-- and the same arguments, sent again after a lookup found nothing while the key is trusted.
-- One reconciliation round: the step is pending again, its attempts and rounds counted, and
-- the lookup that came before it (p_lookup) noted beside the attempt's start, in one commit,
-- before the call. Returns the attempt's number, NULL when the step had settled meanwhile (a
-- notification beat the runner: nothing to retry), and the task's version before and after.
-- No row: the lease was lost, and nothing was written.
CREATE OR REPLACE FUNCTION journal_attempt_start(
    p_task uuid, p_token bigint, p_lease float8, p_step bigint, p_lookup jsonb DEFAULT NULL,
    p_settles jsonb DEFAULT NULL)
RETURNS TABLE (attempt integer, version_was bigint, task_version bigint, settled text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_key text;
BEGIN
    SELECT h.version_was, h.held_version, h.settled INTO version_was, task_version, settled
      FROM journal_hold(p_task => p_task, p_token => p_token, p_lease => p_lease,
                        p_settles => p_settles) h;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    UPDATE journal_step s
       SET state = 'pending', attempts = s.attempts + 1, lookups = s.lookups + 1,
           next_check_at = NULL
     WHERE s.id = p_step AND s.task_id = p_task AND s.state IN ('pending', 'unknown')
    RETURNING s.attempts, s.key INTO attempt, v_key;
    IF FOUND THEN
        IF p_lookup IS NOT NULL THEN
            PERFORM journal_entry_add(p_task => p_task, p_step => p_step, p_kind => 'lookup',
                                      p_actor => '', p_data => p_lookup);
        END IF;
        PERFORM journal_entry_add(
            p_task => p_task, p_step => p_step, p_kind => 'attempt_started', p_actor => '',
            p_data => jsonb_build_object('attempt', attempt, 'key', v_key));
    END IF;
    RETURN NEXT;
END
$$;
