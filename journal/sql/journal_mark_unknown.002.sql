-- A step that may have happened, by its runner, under its lease (docs/design.md §2, §5): the
-- step is unknown, with why (p_detail, p_outcome), and what is done to find out: looked up
-- again in p_next_check_in seconds (the task waits until then), or, when nothing more can be
-- done automatically, the task is handed to a person (p_code, p_reason). p_notes (the attempt
-- that ended, the lookup made) are written first (journal_step_notes); p_count_round counts a
-- reconciliation round. If the step had settled meanwhile (a notification beat the runner),
-- that outcome stands: only the notes are written, and changed is false. Returns that, whether
-- this is the first time the step is unknown (first_unknown, for whoever counts steps that
-- ended unknown once each) and the task's version before and after. No row: the lease was
-- lost, and nothing was written.
CREATE OR REPLACE FUNCTION journal_mark_unknown(
    p_task uuid, p_token bigint, p_lease float8, p_step bigint, p_detail text,
    p_outcome jsonb, p_next_check_in float8 DEFAULT NULL, p_code text DEFAULT '',
    p_reason text DEFAULT '', p_count_round boolean DEFAULT false, p_notes jsonb DEFAULT NULL,
    p_settles jsonb DEFAULT NULL)
RETURNS TABLE (changed boolean, first_unknown boolean, version_was bigint, task_version bigint,
               settled text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_key text;
BEGIN
    IF p_next_check_in IS NULL AND (p_code = '' OR p_reason = '') THEN
        RAISE EXCEPTION 'a step that will not be looked up again goes to a person, with a code and a reason'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF jsonb_typeof(p_outcome) IS DISTINCT FROM 'object' OR p_outcome ? 'evidence' THEN
        RAISE EXCEPTION 'an unknown step carries why, and no evidence'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT h.version_was, h.held_version, h.settled INTO version_was, task_version, settled
      FROM journal_hold(p_task => p_task, p_token => p_token, p_lease => p_lease,
                        p_settles => p_settles) h;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_notes IS NOT NULL THEN
        PERFORM journal_step_notes(p_task => p_task, p_step => p_step, p_notes => p_notes);
    END IF;
    UPDATE journal_step s
       SET state = 'unknown', detail = p_detail, outcome = p_outcome,
           lookups = s.lookups + CASE WHEN p_count_round THEN 1 ELSE 0 END,
           next_check_at = now() + make_interval(secs => p_next_check_in)
     WHERE s.id = p_step AND s.task_id = p_task AND s.state IN ('pending', 'unknown')
    RETURNING s.key INTO v_key;
    changed := FOUND;
    IF changed THEN
        first_unknown := NOT EXISTS (
            SELECT 1 FROM journal_entry e
             WHERE e.task_id = p_task AND e.step_id = p_step AND e.kind = 'step_settled'
               AND e.data->>'state' = 'unknown');
        PERFORM journal_entry_add(
            p_task => p_task, p_step => p_step, p_kind => 'step_settled', p_actor => '',
            p_data => jsonb_build_object('state', 'unknown', 'detail', p_detail) || p_outcome);
        IF p_next_check_in IS NOT NULL THEN
            PERFORM 1 FROM journal_transition(
                p_task => p_task, p_to => 'waiting', p_from => ARRAY['runnable'], p_step => p_step,
                p_wake_at => now() + make_interval(secs => p_next_check_in),
                p_reason => format('step %s is unknown; next lookup in %s s', v_key,
                                   CASE WHEN p_next_check_in = trunc(p_next_check_in)
                                        THEN trunc(p_next_check_in)::bigint::text
                                        ELSE rtrim(rtrim(p_next_check_in::numeric::text, '0'), '.')
                                   END));
        ELSE
            PERFORM 1 FROM journal_transition(
                p_task => p_task, p_to => 'needs_human',
                p_from => ARRAY(SELECT s.status FROM journal_status s),
                p_code => p_code, p_reason => p_reason, p_step => p_step);
        END IF;
        SELECT t.version INTO task_version FROM journal_task t WHERE t.id = p_task;
    END IF;
    RETURN NEXT;
END
$$;
