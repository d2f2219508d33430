-- Drops the journal's partition p_name — its tasks, their steps, entries, approvals, people's
-- decisions and the claims of undos among them — if journal_partition_expired says it may be dropped, asked
-- again once the journal's tables are locked, so that nothing moves in between (docs/design.md
-- §17). What the guards need for good stays: the once-only claims (journal_object_once), with
-- each effect's key, tool and evidence, are kept, so a paid invoice is refused again however
-- long ago it was paid. Returns how many tasks went, or null with nothing dropped (and the
-- reason as a notice). The locks are waited for at most lock_timeout (5 s here): a busy
-- journal is left alone until the next run. Anyone may call it (the sweeper's daily job
-- does, as the app): it drops only what the rule allows.
CREATE OR REPLACE FUNCTION journal_partition_drop(p_name text) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_partition journal_partition;
    v_tasks bigint;
    v_reason text;
BEGIN
    SELECT * INTO v_partition FROM journal_partition p
     WHERE p.name = p_name AND p.dropped_at IS NULL FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- Every writer of the journal takes its tables in this order (an entry after its step,
    -- a step after its task's row): nothing waits on us while we wait on it.
    LOCK TABLE journal_task, journal_step, journal_entry IN SHARE ROW EXCLUSIVE MODE;
    SELECT x.tasks, x.reason INTO v_tasks, v_reason FROM journal_partition_expired(p_name => p_name) x;
    IF v_reason IS NOT NULL THEN
        RAISE NOTICE 'journal partition % is kept: %', p_name, v_reason;
        RETURN NULL;
    END IF;
    PERFORM set_config('journal.retaining', p_name, true);
    EXECUTE format('DELETE FROM journal_approval a WHERE a.task_id IN (SELECT t.id FROM %I t)',
                   'journal_task_' || p_name);
    EXECUTE format('DELETE FROM journal_decision d WHERE d.task_id IN (SELECT t.id FROM %I t)',
                   'journal_task_' || p_name);
    EXECUTE format('DELETE FROM journal_step_undo u WHERE u.step_id IN (SELECT s.id FROM %I s)',
                   'journal_step_' || p_name);
    EXECUTE format('ALTER TABLE journal_entry DETACH PARTITION %I', 'journal_entry_' || p_name);
    EXECUTE format('ALTER TABLE journal_step DETACH PARTITION %I', 'journal_step_' || p_name);
    EXECUTE format('ALTER TABLE journal_task DETACH PARTITION %I', 'journal_task_' || p_name);
    EXECUTE format('DROP TABLE %I, %I, %I', 'journal_entry_' || p_name,
                   'journal_step_' || p_name, 'journal_task_' || p_name);
    UPDATE journal_partition p SET dropped_at = now(), tasks = v_tasks WHERE p.name = p_name;
    RETURN v_tasks;
END
$$;
