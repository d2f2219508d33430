-- The journal's partitions (docs/design.md §17): tasks, steps and entries are partitioned by
-- task id, so by the time a task was made; each range of journal_retention.partition_seconds
-- is a partition of each, named journal_<table>_p<the range's start, Unix seconds>, listed in
-- journal_partition. This makes the ranges that cover [p_from, p_until) and do not exist yet;
-- a range of another width made before is kept, and the next starts where it ends. A range
-- whose tasks the default partition already holds (made while none covered them) is left
-- there, with a warning. Returns how many ranges it made. The owner's alone (migrations, a
-- person with the owner's role); the app may make only the next few (journal_partitions_ensure).
--
-- Each partition's storage: tasks and steps leave room on their pages for a changed row
-- beside the old one (fillfactor 70: a settlement, a status change is a HOT update); steps
-- and tasks, updated as they run, are vacuumed after 5 % of them changed instead of 20 %
-- (their dead rows are a step's whole life of updates), entries, only ever inserted, after
-- 5 % more were inserted, so their pages are frozen and marked all-visible early, before a
-- range ends and its partition is only read.
CREATE OR REPLACE FUNCTION journal_partitions_make(p_from timestamptz, p_until timestamptz)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_seconds float8;
    v_slot float8;
    v_end float8;
    v_covered timestamptz;
    v_name text;
    v_low uuid;
    v_high uuid;
    v_made integer := 0;
    v_schema text;
BEGIN
    -- Made beside their tables (the search path leads with pg_catalog, where nothing is).
    SELECT c.relnamespace::regnamespace::text INTO v_schema FROM pg_class c
     WHERE c.oid = 'journal_task'::regclass;
    SELECT r.partition_seconds INTO v_seconds FROM journal_retention r WHERE r.id = 1;
    IF v_seconds IS NULL OR v_seconds <= 0 THEN
        RAISE EXCEPTION 'journal_retention has no partition width: run migrate';
    END IF;
    v_slot := floor(extract(epoch FROM p_from) / v_seconds) * v_seconds;
    WHILE to_timestamp(v_slot) < p_until LOOP
        v_end := v_slot + v_seconds;
        SELECT max(p.ends) INTO v_covered FROM journal_partition p
         WHERE p.starts < to_timestamp(v_end) AND p.ends > to_timestamp(v_slot);
        IF v_covered IS NOT NULL THEN
            -- This range is (partly) made already: go on from the end of what covers it.
            v_slot := extract(epoch FROM v_covered);
            CONTINUE;
        END IF;
        SELECT min(p.starts) INTO v_covered FROM journal_partition p
         WHERE p.starts > to_timestamp(v_slot) AND p.starts < to_timestamp(v_end);
        IF v_covered IS NOT NULL THEN
            v_end := extract(epoch FROM v_covered);
        END IF;
        v_name := 'p' || floor(v_slot)::bigint::text;
        v_low := journal_uuid_at(p_at => to_timestamp(v_slot));
        v_high := journal_uuid_at(p_at => to_timestamp(v_end));
        BEGIN
            EXECUTE format(
                'CREATE TABLE %I.%I PARTITION OF journal_task FOR VALUES FROM (%L) TO (%L) '
                'WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.05)',
                v_schema, 'journal_task_' || v_name, v_low, v_high);
            EXECUTE format(
                'CREATE TABLE %I.%I PARTITION OF journal_step FOR VALUES FROM (%L) TO (%L) '
                'WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.05)',
                v_schema, 'journal_step_' || v_name, v_low, v_high);
            EXECUTE format(
                'CREATE TABLE %I.%I PARTITION OF journal_entry FOR VALUES FROM (%L) TO (%L) '
                'WITH (autovacuum_vacuum_insert_scale_factor = 0.05)',
                v_schema, 'journal_entry_' || v_name, v_low, v_high);
            INSERT INTO journal_partition (name, starts, ends, made_at)
            VALUES (v_name, to_timestamp(v_slot), to_timestamp(v_end), now());
            v_made := v_made + 1;
        EXCEPTION WHEN check_violation THEN
            RAISE WARNING 'journal partition %: the default partition holds tasks of this range, left there (%)',
                v_name, SQLERRM;
        END;
        v_slot := v_end;
    END LOOP;
    RETURN v_made;
END
$$;

REVOKE ALL ON FUNCTION journal_partitions_make(timestamptz, timestamptz) FROM PUBLIC;
