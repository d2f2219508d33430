-- What an audit of the provider's records found about a step (docs/design.md §15): the effect
-- refunded or cancelled at the provider, missing there, of another amount. Recorded on its
-- task (an audit_finding entry with p_data), and the task handed to a person with the
-- sentence, unless a person has it already (their reason is kept; the finding is on its
-- page). Nothing else changes: the step keeps its outcome. Returns whether the task was
-- handed over now.
CREATE OR REPLACE FUNCTION journal_step_audited(
    p_step bigint, p_summary text, p_actor text, p_data jsonb DEFAULT '{}'::jsonb)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_task uuid;
    v_status text;
BEGIN
    UPDATE journal_task t SET version = t.version + 1
     WHERE t.id = (SELECT s.task_id FROM journal_step s WHERE s.id = p_step)
    RETURNING t.id, t.status INTO v_task, v_status;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'there is no step %', p_step USING ERRCODE = 'foreign_key_violation';
    END IF;
    PERFORM journal_entry_add(
        p_task => v_task, p_step => p_step, p_kind => 'audit_finding', p_actor => p_actor,
        p_data => COALESCE(p_data, '{}'::jsonb) || jsonb_build_object('summary', p_summary));
    IF v_status = 'needs_human' THEN
        RETURN false;
    END IF;
    PERFORM 1 FROM journal_transition(
        p_task => v_task, p_to => 'needs_human', p_from => ARRAY(SELECT s.status FROM journal_status s),
        p_code => 'audit_finding', p_reason => 'provider audit: ' || p_summary, p_step => p_step,
        p_actor => p_actor);
    RETURN true;
END
$$;
