-- A runner puts its task back to wait for a person's decision on its saga's held step, still
-- pending (docs/design.md §7): resumed while the decision is awaited, it waits again. Under its
-- lease, from runnable, giving the lease back (the run ends here). No row: the lease was
-- taken over; moved is false when the task was not runnable or p_approval is not pending.
CREATE OR REPLACE FUNCTION journal_task_await(
    p_task uuid, p_token bigint, p_lease float8, p_approval bigint,
    p_settles jsonb DEFAULT NULL)
RETURNS TABLE (moved boolean, version_was bigint, task_version bigint, settled text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_from text;
    v_version bigint;
    v_reason text;
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
    SELECT a.reason INTO v_reason FROM journal_approval a
     WHERE a.id = p_approval AND a.task_id = p_task AND a.state = 'pending';
    IF NOT FOUND THEN
        moved := false;
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT t.moved_from, t.task_version INTO v_from, v_version
      FROM journal_transition(
          p_task => p_task, p_to => 'awaiting_approval', p_from => ARRAY['runnable'],
          p_reason => v_reason, p_data => jsonb_build_object('approval', p_approval),
          p_release => p_token) t;
    moved := v_from IS NOT NULL;
    task_version := COALESCE(v_version, task_version);
    RETURN NEXT;
END
$$;
