-- A task born (docs/design.md §4): its row and its first entry (task_created) in one
-- statement, so that starting a task is one round trip and, in autocommit, one commit. Only
-- what a task is for is the caller's: its id (journal.keys.task_id_new: its time is its range,
-- §17), kind, goal, references and a saga's plan; everything else starts as every task starts
-- (runnable, no lease, no steps), and when it was made is the database's clock. p_entry is the
-- first entry's data. Returns when it was made.
CREATE OR REPLACE FUNCTION journal_task_create(
    p_id uuid, p_kind text, p_goal text, p_refs jsonb, p_plan jsonb, p_entry jsonb,
    p_actor text DEFAULT '')
RETURNS timestamptz
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_at timestamptz := now();
BEGIN
    IF jsonb_typeof(p_refs) IS DISTINCT FROM 'object' OR jsonb_typeof(p_plan) IS DISTINCT FROM 'array'
       OR COALESCE(p_kind, '') = '' THEN
        RAISE EXCEPTION 'a task has a kind, its references (an object) and a plan (a list)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO journal_task (
        id, kind, goal, refs, status, attention_code, attention, wake_at, plan, unwinding,
        step_count, created_at, lease_owner, lease_token, lease_expires_at, lease_taken_at,
        version, shortfall, failed_runs, ended_as)
    VALUES (
        p_id, p_kind, COALESCE(p_goal, ''), p_refs, 'runnable', '', '', NULL, p_plan, false,
        0, v_at, '', 0, NULL, NULL, 0, false, 0, '');
    PERFORM journal_entry_add(
        p_task => p_id, p_step => NULL, p_kind => 'task_created', p_actor => p_actor,
        p_data => p_entry);
    RETURN v_at;
END
$$;
