-- The key of step n of a task: ao:<task>:<n> (docs/design.md §3). Derived from the step's id
-- and from nothing else; the one place the format is written.
CREATE OR REPLACE FUNCTION journal_step_key(p_task uuid, p_n integer) RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    RETURN 'ao:' || p_task::text || ':' || p_n::text;
END
$$;
