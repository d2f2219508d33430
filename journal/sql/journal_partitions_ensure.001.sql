-- The journal's next partitions (docs/design.md §17): the range of now, the one before and
-- journal_retention.ahead more, made if they do not exist yet (journal_partitions_make).
-- Anyone may call it (the sweeper's daily job does, as the app): it makes only these.
CREATE OR REPLACE FUNCTION journal_partitions_ensure() RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_seconds float8;
    v_ahead integer;
BEGIN
    SELECT r.partition_seconds, r.ahead INTO v_seconds, v_ahead
      FROM journal_retention r WHERE r.id = 1;
    RETURN journal_partitions_make(
        p_from => now() - make_interval(secs => v_seconds),
        p_until => now() + make_interval(secs => v_seconds * (v_ahead + 1)));
END
$$;
