-- A task born (docs/design.md §4): its row and its first entry (task_created) in one
-- statement, so that starting a task is one round trip and, in autocommit, one commit. The row
-- is the caller's (the model's fields, its defaults filled in, as JSON: p_task) but for when
-- it was made, which is the database's clock; its id is the caller's too (journal.keys.
-- task_id_new: its time is its range, §17). Returns when it was made.
CREATE OR REPLACE FUNCTION journal_task_create(p_task jsonb, p_entry jsonb, p_actor text DEFAULT '')
RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_task journal_task;
BEGIN
    v_task := jsonb_populate_record(NULL::journal_task, p_task);
    v_task.created_at := now();
    INSERT INTO journal_task SELECT v_task.*;
    PERFORM journal_entry_add(
        p_task => v_task.id, p_step => NULL, p_kind => 'task_created', p_actor => p_actor,
        p_data => p_entry);
    RETURN v_task.created_at;
END
$$;
