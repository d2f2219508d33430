-- A runner parks its task until p_wake_at (docs/design.md §5, §7): a retry's backoff, news of
-- an effect it builds on, another task's step it must not act beside. From runnable only,
-- under its lease, which it gives back in the same statement (the run ends here). No row:
-- the lease was taken over; moved is false when the settlement held back (p_settles) met a
-- contradicting report, or moved is false when the task was not runnable.
CREATE OR REPLACE FUNCTION journal_task_wait(
    p_task uuid, p_token bigint, p_lease float8, p_wake_at timestamptz, p_reason text,
    p_settles jsonb DEFAULT NULL)
RETURNS TABLE (moved boolean, version_was bigint, task_version bigint, settled text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_from text;
    v_version bigint;
BEGIN
    SELECT h.ok, h.version_was, h.held_version, h.settled INTO moved, version_was, task_version, settled
      FROM journal_hold(p_task => p_task, p_token => p_token, p_lease => p_lease,
                        p_settles => p_settles) h;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF NOT moved THEN  -- the settlement held back met a contradicting report: the task moved
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT t.moved_from, t.task_version INTO v_from, v_version
      FROM journal_transition(p_task => p_task, p_to => 'waiting', p_from => ARRAY['runnable'],
                              p_reason => p_reason, p_wake_at => p_wake_at,
                              p_release => p_token) t;
    moved := v_from IS NOT NULL;
    task_version := COALESCE(v_version, task_version);
    RETURN NEXT;
END
$$;
