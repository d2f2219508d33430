-- A runner wakes its waiting task whose time came (docs/design.md §7), under its lease. No
-- row: the lease was taken over; moved is false when the task was not waiting, or its time
-- has not come by the database's clock.
CREATE OR REPLACE FUNCTION journal_task_wake(
    p_task uuid, p_token bigint, p_lease float8, p_reason text,
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
    IF NOT EXISTS (SELECT 1 FROM journal_task t WHERE t.id = p_task AND t.wake_at <= now()) THEN
        moved := false;
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT t.moved_from, t.task_version INTO v_from, v_version
      FROM journal_transition(p_task => p_task, p_to => 'runnable', p_from => ARRAY['waiting'],
                              p_reason => p_reason) t;
    moved := v_from IS NOT NULL;
    task_version := COALESCE(v_version, task_version);
    RETURN NEXT;
END
$$;
