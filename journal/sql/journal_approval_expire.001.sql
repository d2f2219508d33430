-- A runner marks its saga's approval that ran out as expired, under its lease (docs/design.md
-- §7): its time passed by the database's clock, undecided or unused. Returns whether it
-- expired now, and the task's version before and after. No row: the lease was lost.
CREATE OR REPLACE FUNCTION journal_approval_expire(
    p_task uuid, p_token bigint, p_lease float8, p_approval bigint, p_settles jsonb DEFAULT NULL)
RETURNS TABLE (expired boolean, version_was bigint, task_version bigint, settled text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    SELECT h.version_was, h.held_version, h.settled INTO version_was, task_version, settled
      FROM journal_hold(p_task => p_task, p_token => p_token, p_lease => p_lease,
                        p_settles => p_settles) h;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    expired := journal_approval_expired(p_approval => p_approval, p_task => p_task, p_actor => 'harness');
    RETURN NEXT;
END
$$;
