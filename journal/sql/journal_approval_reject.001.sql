-- A person rejects the held step (docs/design.md §7): it never runs, and the saga compensates
-- what it did. Who, when, why and what are recorded; refused (SQLSTATE AO001) when nothing
-- waits for a decision.
CREATE OR REPLACE FUNCTION journal_approval_reject(
    p_task uuid, p_approval bigint, p_actor text, p_reason text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_why text := journal_person_reason(p_reason => p_reason);
    v_approval journal_approval;
BEGIN
    v_approval := journal_approval_awaiting(p_task => p_task, p_approval => p_approval);
    UPDATE journal_approval a
       SET state = 'rejected', decided_by = p_actor, decided_at = now(), decision_reason = v_why
     WHERE a.id = p_approval;
    PERFORM journal_entry_add(
        p_task => p_task, p_step => NULL, p_kind => 'approval_decided', p_actor => p_actor,
        p_data => jsonb_build_object('approval', p_approval, 'decision', 'rejected',
                                     'tool', v_approval.tool, 'args', v_approval.args,
                                     'digest', v_approval.digest, 'reason', v_why));
    PERFORM journal_saga_unwound(
        p_task => p_task, p_reason => format('%s rejected by %s: %s', v_approval.tool, p_actor, v_why),
        p_actor => p_actor);
    PERFORM 1 FROM journal_transition(
        p_task => p_task, p_to => 'runnable', p_from => ARRAY['awaiting_approval'],
        p_actor => p_actor, p_reason => format('rejected by %s: %s', p_actor, v_why));
END
$$;
