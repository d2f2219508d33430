-- The lease check (docs/design.md §11): the first statement of every write under a lease.
-- Checks the token, extends the lease, takes the task row's lock until commit, and bumps the
-- task's version; with p_steps, numbers the steps about to be written; with p_runnable, only
-- a runnable task; with p_forward, only a task that is not unwinding. No row: the lease was
-- taken over (or the task is not in the state asked for), and nothing was changed.
CREATE OR REPLACE FUNCTION journal_fence(
    p_task uuid, p_token bigint, p_lease float8,
    p_steps integer DEFAULT 0, p_runnable boolean DEFAULT false, p_forward boolean DEFAULT false)
RETURNS TABLE (fenced_steps integer, fenced_status text, fenced_version bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    UPDATE journal_task t
       SET lease_expires_at = now() + make_interval(secs => p_lease),
           step_count = t.step_count + p_steps,
           version = t.version + 1
     WHERE t.id = p_task AND t.lease_token = p_token
       AND (NOT p_runnable OR t.status = 'runnable')
       AND (NOT p_forward OR NOT t.unwinding)
    RETURNING t.step_count, t.status, t.version
         INTO fenced_steps, fenced_status, fenced_version;
    IF FOUND THEN
        RETURN NEXT;
    END IF;
END
$$;
