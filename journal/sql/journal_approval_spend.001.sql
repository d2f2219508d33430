-- The approved call was recorded but refused (another effect on its object stood in the way:
-- docs/design.md §6, §7): its approval is used up by the refused step, under the runner's
-- lease, and the saga decides again. Returns whether it was used now, and the task's version
-- before and after. No row: the lease was lost.
CREATE OR REPLACE FUNCTION journal_approval_spend(
    p_task uuid, p_token bigint, p_lease float8, p_approval bigint, p_step bigint,
    p_settles jsonb DEFAULT NULL)
RETURNS TABLE (spent boolean, version_was bigint, task_version bigint, settled text)
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
    UPDATE journal_approval a SET state = 'used', used_by_id = p_step
     WHERE a.id = p_approval AND a.task_id = p_task AND a.state = 'approved'
       AND EXISTS (SELECT 1 FROM journal_step s
                    WHERE s.id = p_step AND s.task_id = p_task AND s.state = 'not_done'
                      AND s.refusal <> '' AND s.tool = a.tool AND s.args = a.args);
    spent := FOUND;
    RETURN NEXT;
END
$$;
