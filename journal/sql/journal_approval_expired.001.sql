-- An approval that was not decided, or not used, in time is marked expired, with its entry
-- (docs/design.md §7). Not a move of its own: its runner expires it (journal_approval_expire)
-- and a person's approval that came too late does (journal_approval_approve). Returns whether
-- it expired now.
CREATE OR REPLACE FUNCTION journal_approval_expired(p_approval bigint, p_task uuid, p_actor text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_expires timestamptz;
BEGIN
    UPDATE journal_approval a SET state = 'expired'
     WHERE a.id = p_approval AND a.task_id = p_task AND a.state IN ('pending', 'approved')
       AND a.expires_at <= now()
    RETURNING a.expires_at INTO v_expires;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM journal_entry_add(
        p_task => p_task, p_step => NULL, p_kind => 'approval_decided', p_actor => p_actor,
        p_data => jsonb_build_object('approval', p_approval, 'decision', 'expired',
                                     'expires_at', v_expires));
    RETURN true;
END
$$;
