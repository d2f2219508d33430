-- A runner has its saga compensate (docs/design.md §7): a step did not happen and the saga
-- cannot complete. Under its lease. Returns whether this call started it, and the task's
-- version before and after. No row: the lease was lost.
CREATE OR REPLACE FUNCTION journal_saga_unwind(
    p_task uuid, p_token bigint, p_lease float8, p_reason text, p_settles jsonb DEFAULT NULL)
RETURNS TABLE (started boolean, version_was bigint, task_version bigint, settled text)
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
    started := journal_saga_unwound(p_task => p_task, p_reason => p_reason);
    SELECT t.version INTO task_version FROM journal_task t WHERE t.id = p_task;
    RETURN NEXT;
END
$$;
