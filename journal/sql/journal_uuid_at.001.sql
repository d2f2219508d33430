-- The lowest task id (a UUID version 7, journal.keys.task_id_new) of a moment: its first 48
-- bits the Unix time in milliseconds, the rest zero. The bounds of the journal's partitions
-- (docs/design.md §17): every task made from a moment a until a moment b has an id from
-- this function's value at a until its value at b.
CREATE OR REPLACE FUNCTION journal_uuid_at(p_at timestamptz) RETURNS uuid
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    RETURN (lpad(to_hex(floor(extract(epoch FROM p_at) * 1000)::bigint), 12, '0')
            || '00000000000000000000')::uuid;
END
$$;
