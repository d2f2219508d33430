-- A person approves the held step they were shown (docs/design.md §7), named by its digest
-- (of its tool and arguments): the saga goes on with exactly that step, and true is returned.
-- Refused (SQLSTATE AO001, nothing written) when p_digest is not what waits: the person saw
-- something else. When the request has expired, it is not given: it is marked expired, the
-- task goes back to decide again and ask anew, and false is returned. p_reason is optional
-- (approving is the expected answer); who, when, why and exactly what are recorded.
CREATE OR REPLACE FUNCTION journal_approval_approve(
    p_task uuid, p_approval bigint, p_digest text, p_actor text, p_reason text DEFAULT '')
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_why text := left(btrim(COALESCE(p_reason, '')), 2000);
    v_approval journal_approval;
BEGIN
    IF COALESCE(p_actor, '') = '' THEN
        RAISE EXCEPTION 'say who approves: the journal records it' USING ERRCODE = 'AO001';
    END IF;
    v_approval := journal_approval_awaiting(p_task => p_task, p_approval => p_approval);
    IF p_digest IS DISTINCT FROM v_approval.digest THEN
        RAISE EXCEPTION '%', format(
            'approval %s is for %s with arguments digest %s…, not %s…: approve what is shown now',
            p_approval, v_approval.tool, left(v_approval.digest, 12), left(COALESCE(p_digest, ''), 12))
            USING ERRCODE = 'AO001';
    END IF;
    IF v_approval.expires_at <= now() THEN
        PERFORM journal_approval_expired(p_approval => p_approval, p_task => p_task, p_actor => p_actor);
        PERFORM 1 FROM journal_transition(
            p_task => p_task, p_to => 'runnable', p_from => ARRAY['awaiting_approval'],
            p_actor => p_actor,
            p_reason => 'the request for approval expired; the saga decides again and asks anew');
        RETURN false;
    END IF;
    UPDATE journal_approval a
       SET state = 'approved', decided_by = p_actor, decided_at = now(), decision_reason = v_why
     WHERE a.id = p_approval;
    PERFORM journal_entry_add(
        p_task => p_task, p_step => NULL, p_kind => 'approval_decided', p_actor => p_actor,
        p_data => jsonb_build_object('approval', p_approval, 'decision', 'approved',
                                     'digest', v_approval.digest, 'tool', v_approval.tool,
                                     'args', v_approval.args)
                  || CASE WHEN v_why <> '' THEN jsonb_build_object('reason', v_why) ELSE '{}'::jsonb END);
    PERFORM 1 FROM journal_transition(
        p_task => p_task, p_to => 'runnable', p_from => ARRAY['awaiting_approval'],
        p_actor => p_actor, p_reason => format('%s approved by %s', v_approval.tool, p_actor));
    RETURN true;
END
$$;
