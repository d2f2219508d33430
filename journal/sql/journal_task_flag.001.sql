-- A runner hands its task to a person, with a code and a sentence (docs/design.md §7): its
-- planner or tools failed, a step cannot be settled automatically, its runs keep failing.
-- Under its lease, from any status of p_from (default: any), giving the lease back in the
-- same statement when p_release (the run ends here). No row: the lease was taken over;
-- moved is false when the task was in no status of p_from.
CREATE OR REPLACE FUNCTION journal_task_flag(
    p_task uuid, p_token bigint, p_lease float8, p_code text, p_reason text,
    p_step bigint DEFAULT NULL, p_release boolean DEFAULT false, p_from text[] DEFAULT NULL,
    p_settles jsonb DEFAULT NULL)
RETURNS TABLE (moved boolean, version_was bigint, task_version bigint, settled text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_from text;
    v_version bigint;
BEGIN
    SELECT h.ok, h.version_was, h.held_version, h.settled INTO moved, version_was, task_version, settled
      FROM journal_hold(p_task => p_task, p_token => p_token, p_lease => p_lease,
                        p_settles => p_settles) h;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF NOT moved THEN  -- the settlement held back met a contradicting report: the task moved
        RETURN NEXT;
        RETURN;
    END IF;
    IF p_step IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM journal_step s WHERE s.id = p_step AND s.task_id = p_task) THEN
        RAISE EXCEPTION 'step % is not a step of task %', p_step, p_task
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    SELECT t.moved_from, t.task_version INTO v_from, v_version
      FROM journal_transition(
          p_task => p_task, p_to => 'needs_human',
          p_from => COALESCE(p_from, ARRAY(SELECT s.status FROM journal_status s)),
          p_code => p_code, p_reason => p_reason, p_step => p_step,
          p_release => CASE WHEN p_release THEN p_token END) t;
    moved := v_from IS NOT NULL;
    task_version := COALESCE(v_version, task_version);
    RETURN NEXT;
END
$$;
