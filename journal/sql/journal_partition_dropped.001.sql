-- The task ids of the journal's partition p_name, once it has been dropped (docs/design.md
-- §17): what the apps beside the journal remove of their own rows about its tasks. No row:
-- no such partition, or not dropped (then nothing of it may go).
CREATE OR REPLACE FUNCTION journal_partition_dropped(p_name text)
RETURNS TABLE (low uuid, high uuid)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT journal_uuid_at(p_at => p.starts), journal_uuid_at(p_at => p.ends)
      FROM journal_partition p
     WHERE p.name = p_name AND p.dropped_at IS NOT NULL;
END
$$;
