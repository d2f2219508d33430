-- An entry (docs/design.md §4): the one place one is written. Entries are never updated or
-- deleted (journal_entry_append_only).
CREATE OR REPLACE FUNCTION journal_entry_add(
    p_task uuid, p_step bigint, p_kind text, p_actor text, p_data jsonb)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_id bigint;
BEGIN
    INSERT INTO journal_entry (task_id, step_id, kind, at, actor, data)
    VALUES (p_task, p_step, p_kind, now(), COALESCE(p_actor, ''), COALESCE(p_data, '{}'::jsonb))
    RETURNING id INTO v_id;
    RETURN v_id;
END
$$;
