-- A lease given back (docs/design.md §11): the one place it happens, for the runner whose run
-- ends (from Python) and for every move that ends a run in the same statement
-- (journal_transition's p_release). Only the holder's token gives it back: a late release by
-- a runner that was taken over changes nothing. p_clean says the run ended as it should
-- (finished, waiting, handed to a person): its run-failure count is cleared. When the lease
-- was taken (lease_taken_at) is kept: it says when the last run began. p_settles: a
-- settlement the runner held back, written first (journal_hold). Returns whether the lease
-- was the caller's to give back, and what became of p_settles (journal_hold's settled).
CREATE OR REPLACE FUNCTION journal_lease_release(
    p_task uuid, p_token bigint, p_clean boolean DEFAULT true, p_settles jsonb DEFAULT NULL)
RETURNS TABLE (released boolean, settled text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF p_settles IS NOT NULL THEN
        SELECT h.settled INTO settled
          FROM journal_hold(p_task => p_task, p_token => p_token, p_lease => 0,
                            p_settles => p_settles) h;
    END IF;
    UPDATE journal_task t
       SET lease_expires_at = NULL, lease_owner = '',
           failed_runs = CASE WHEN p_clean THEN 0 ELSE t.failed_runs END
     WHERE t.id = p_task AND t.lease_token = p_token;
    released := FOUND;
    RETURN NEXT;
END
$$;
