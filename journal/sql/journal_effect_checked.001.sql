-- What the provider said about whether an earlier effect of the task still stands, noted by
-- its runner under its lease before it builds on it (docs/design.md §7): p_stands true,
-- false, or NULL when the provider could not tell (p_error). Returns the task's version
-- before and after. No row: the lease was lost.
CREATE OR REPLACE FUNCTION journal_effect_checked(
    p_task uuid, p_token bigint, p_lease float8, p_n integer, p_stands boolean,
    p_error text DEFAULT '', p_settles jsonb DEFAULT NULL)
RETURNS TABLE (version_was bigint, task_version bigint, settled text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_step bigint;
BEGIN
    SELECT h.version_was, h.held_version, h.settled INTO version_was, task_version, settled
      FROM journal_hold(p_task => p_task, p_token => p_token, p_lease => p_lease,
                        p_settles => p_settles) h;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT s.id INTO v_step FROM journal_step s
     WHERE s.task_id = p_task AND s.n = p_n AND s.state = 'done';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'step % of task % is not a done effect', p_n, p_task
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    PERFORM journal_entry_add(
        p_task => p_task, p_step => v_step, p_kind => 'effect_checked', p_actor => '',
        p_data => jsonb_build_object('stands', p_stands)
                  || CASE WHEN COALESCE(p_error, '') <> '' THEN jsonb_build_object('error', p_error)
                          ELSE '{}'::jsonb END);
    RETURN NEXT;
END
$$;
