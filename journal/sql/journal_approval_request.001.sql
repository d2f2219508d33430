-- A saga held before a call until a person decides (docs/design.md §7), by its runner under
-- its lease: the approval of exactly that call (its tool and arguments, and their digest,
-- which the person's decision must name) and the task awaiting approval, in one commit, the
-- lease given back (the run ends here). The request expires p_ttl seconds from now. Returns
-- the approval's id and digest, the task's version before and after, and what became of
-- p_settles; approval is NULL when the task moved (not runnable) and nothing was asked. No
-- row: the lease was lost.
CREATE OR REPLACE FUNCTION journal_approval_request(
    p_task uuid, p_token bigint, p_lease float8, p_tool text, p_args jsonb, p_reason text,
    p_ttl float8, p_settles jsonb DEFAULT NULL)
RETURNS TABLE (approval bigint, approval_digest text, version_was bigint, task_version bigint,
               settled text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_ok boolean;
BEGIN
    SELECT h.ok, h.version_was, h.held_version, h.settled INTO v_ok, version_was, task_version, settled
      FROM journal_hold(p_task => p_task, p_token => p_token, p_lease => p_lease,
                        p_settles => p_settles, p_runnable => true) h;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF NOT v_ok THEN
        RETURN NEXT;
        RETURN;
    END IF;
    IF p_ttl IS NULL OR p_ttl < 0 OR COALESCE(p_reason, '') = '' THEN
        RAISE EXCEPTION 'an approval is asked for with a reason, for a time'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    approval_digest := encode(sha256(convert_to(
        jsonb_build_object('tool', p_tool, 'args', p_args)::text, 'UTF8')), 'hex');
    INSERT INTO journal_approval (task_id, tool, args, digest, reason, state, requested_at,
                                  expires_at, decided_by, decision_reason)
    VALUES (p_task, p_tool, p_args, approval_digest, p_reason, 'pending', now(),
            now() + make_interval(secs => p_ttl), '', '')
    RETURNING id INTO approval;
    SELECT t.task_version INTO task_version
      FROM journal_transition(
          p_task => p_task, p_to => 'awaiting_approval', p_from => ARRAY['runnable'],
          p_reason => p_reason, p_release => p_token,
          p_data => jsonb_build_object('approval', approval, 'tool', p_tool,
                                       'digest', approval_digest)) t;
    RETURN NEXT;
END
$$;
