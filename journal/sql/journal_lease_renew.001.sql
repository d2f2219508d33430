-- A lease stretched by its holder (docs/design.md §11): before a planner that takes time is
-- asked, for its budget (p_lease seconds from now). p_settles: a settlement the runner held
-- back, written first, so the truth is durable while a model thinks (journal_hold). Returns
-- the task's step count and status, its version before and after, and what became of
-- p_settles. No row: the lease was taken over, and nothing changed.
CREATE OR REPLACE FUNCTION journal_lease_renew(
    p_task uuid, p_token bigint, p_lease float8, p_settles jsonb DEFAULT NULL)
RETURNS TABLE (held_steps integer, held_status text, version_was bigint, task_version bigint,
               settled text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    RETURN QUERY SELECT h.held_steps, h.held_status, h.version_was, h.held_version, h.settled
                   FROM journal_hold(p_task => p_task, p_token => p_token, p_lease => p_lease,
                                     p_settles => p_settles) h;
END
$$;
