-- A task's lease taken for a run (docs/design.md §11): only when nobody holds a live one, by
-- the database's clock. The token goes up (every write under the lease is fenced by it:
-- journal_fence), and the run counts as failed until it gives the lease back cleanly
-- (journal_lease_release), so a runner that dies leaves the count up for the next one to
-- see. Returns the task's row as it is now, which the run is built from; no row: somebody
-- holds it, or there is no such task.
CREATE OR REPLACE FUNCTION journal_lease_take(p_task uuid, p_owner text, p_lease float8)
RETURNS SETOF journal_task
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    RETURN QUERY
    UPDATE journal_task t
       SET lease_token = t.lease_token + 1,
           lease_owner = left(p_owner, 200),
           lease_expires_at = now() + make_interval(secs => p_lease),
           lease_taken_at = now(),
           failed_runs = t.failed_runs + 1
     WHERE t.id = p_task AND (t.lease_expires_at IS NULL OR t.lease_expires_at <= now())
    RETURNING t.*;
END
$$;
