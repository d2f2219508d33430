-- Whether the journal's partition p_name may be dropped now (docs/design.md §17), and why
-- not: its range ended more than journal_retention.keep_seconds ago (never, when that is
-- null), every task in it is over (finished, cancelled or compensated: journal.status.FINAL),
-- none of its steps is open (in flight, unknown, due for a lookup), and nothing has been
-- written about any of them for keep_seconds (a late notification, a person's correction).
-- Returns the number of tasks it holds and, when it may not be dropped, the reason (null when
-- it may). The one place the rule is written: journal_partition_drop asks it again, under
-- the tables' locks, before it drops.
CREATE OR REPLACE FUNCTION journal_partition_expired(p_name text)
RETURNS TABLE (tasks bigint, reason text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_partition journal_partition;
    v_keep float8;
    v_cutoff timestamptz;
    v_open bigint;
    v_last timestamptz;
    v_busy boolean;
BEGIN
    SELECT * INTO v_partition FROM journal_partition p WHERE p.name = p_name;
    IF NOT FOUND OR v_partition.dropped_at IS NOT NULL THEN
        tasks := 0;
        reason := 'no such partition';
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT r.keep_seconds INTO v_keep FROM journal_retention r WHERE r.id = 1;
    EXECUTE format(
        'SELECT count(*), count(*) FILTER (WHERE t.status NOT IN (''finished'', ''cancelled'', ''compensated'')) FROM %I t',
        'journal_task_' || p_name) INTO tasks, v_open;
    IF v_keep IS NULL THEN
        reason := 'the journal is kept for good (no retention is set)';
    ELSE
        v_cutoff := journal_retention_before();
        IF v_partition.ends > v_cutoff THEN
            reason := format('its range ends %s, less than the retention of %s s ago',
                             v_partition.ends, v_keep);
        ELSIF v_open > 0 THEN
            reason := format('%s of its %s tasks are not over', v_open, tasks);
        END IF;
    END IF;
    IF reason IS NULL THEN
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I s WHERE s.next_check_at IS NOT NULL) '
                       'OR EXISTS (SELECT 1 FROM journal_object_live l JOIN %I s ON s.id = l.step_id)',
                       'journal_step_' || p_name, 'journal_step_' || p_name) INTO v_busy;
        IF v_busy THEN
            reason := 'a step of it is in flight or unknown';
        END IF;
    END IF;
    IF reason IS NULL THEN
        EXECUTE format('SELECT e.at FROM %I e ORDER BY e.id DESC LIMIT 1', 'journal_entry_' || p_name)
           INTO v_last;
        IF v_last > v_cutoff THEN
            reason := format('something was written about one of its tasks at %s, less than the retention ago', v_last);
        END IF;
    END IF;
    RETURN NEXT;
END
$$;
