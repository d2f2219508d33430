-- The moment before which the journal's retention lets go (docs/design.md §17): now less the
-- keep the owner set (journal_retention.keep_seconds); null while everything is kept for good.
-- The one place the keep is turned into a moment: a range of the journal may go once it
-- ended before it (journal_partition_expired), and what the apps keep beside the journal
-- (a provider's notifications, resolved audit findings) once it was received or resolved
-- before it.
CREATE OR REPLACE FUNCTION journal_retention_before() RETURNS timestamptz
LANGUAGE sql
STABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT now() - make_interval(secs => r.keep_seconds)
      FROM journal_retention r
     WHERE r.id = 1 AND r.keep_seconds IS NOT NULL
$$;
