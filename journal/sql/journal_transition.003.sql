-- A task's status changes here and nowhere else (docs/design.md §7). Not a move of its own:
-- the moves that change a status (journal_task_wait, journal_finish, journal_task_resume...)
-- check their own preconditions, then call it; no app role may call it directly.
--
-- It moves the task to p_to if its status is one of p_from (a row whose moved_from is NULL:
-- it was in none of them, and nothing was written), along the state machine only
-- (journal_status_move, written from journal.status.TRANSITIONS), and never runs a task that
-- ended again: once a task has been finished, cancelled or compensated (ended_as), it may be
-- handed to a person (a late report contradicts it) and go back to how it ended, nothing
-- else. A waiting task has a time to wake, a task in front of a person a code and a sentence.
-- One entry says from what, to what, who and why. With p_release, the lease of that token is
-- given back in the same statement (journal_lease_release): the run ends here.
CREATE OR REPLACE FUNCTION journal_transition(
    p_task uuid, p_to text, p_from text[], p_actor text DEFAULT '', p_reason text DEFAULT '',
    p_code text DEFAULT '', p_step bigint DEFAULT NULL, p_data jsonb DEFAULT '{}'::jsonb,
    p_wake_at timestamptz DEFAULT NULL, p_release bigint DEFAULT NULL)
RETURNS TABLE (moved_from text, task_version bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_was text;
    v_ended text;
    v_final boolean;
    v_data jsonb;
BEGIN
    SELECT t.status, t.ended_as INTO v_was, v_ended FROM journal_task t WHERE t.id = p_task FOR UPDATE;
    IF v_was IS NULL OR NOT (v_was = ANY (p_from)) THEN
        RETURN QUERY SELECT NULL::text, NULL::bigint;
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM journal_status_move m
                    WHERE m.from_status = v_was AND m.to_status = p_to) THEN
        RAISE EXCEPTION 'task %: % -> % is not a transition of its state machine', p_task, v_was, p_to
            USING ERRCODE = 'check_violation';
    END IF;
    IF v_ended <> '' AND p_to NOT IN ('needs_human', v_ended) THEN
        RAISE EXCEPTION 'task % ended % and never runs again: % refused', p_task, v_ended, p_to
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF p_to = 'waiting' AND p_wake_at IS NULL THEN
        RAISE EXCEPTION 'task %: a waiting task has a time to wake', p_task
            USING ERRCODE = 'check_violation';
    END IF;
    IF p_to = 'needs_human' AND (COALESCE(p_code, '') = '' OR COALESCE(p_reason, '') = '') THEN
        RAISE EXCEPTION 'task %: a task in front of a person has a code and a sentence saying why', p_task
            USING ERRCODE = 'check_violation';
    END IF;
    SELECT s.final INTO v_final FROM journal_status s WHERE s.status = p_to;
    UPDATE journal_task t
       SET status = p_to,
           wake_at = CASE WHEN p_to = 'waiting' THEN p_wake_at END,
           version = t.version + 1,
           attention = CASE WHEN p_to = 'needs_human' THEN p_reason ELSE '' END,
           attention_code = CASE WHEN p_to = 'needs_human' THEN p_code ELSE '' END,
           ended_as = CASE WHEN v_final AND t.ended_as = '' THEN p_to ELSE t.ended_as END
     WHERE t.id = p_task
    RETURNING t.version INTO task_version;
    IF p_release IS NOT NULL THEN
        PERFORM journal_lease_release(p_task => p_task, p_token => p_release, p_clean => true);
    END IF;
    v_data := jsonb_build_object('from', v_was, 'to', p_to) || COALESCE(p_data, '{}'::jsonb);
    IF p_reason <> '' THEN
        v_data := v_data || jsonb_build_object('reason', p_reason);
    END IF;
    IF p_code <> '' THEN
        v_data := v_data || jsonb_build_object('code', p_code);
    END IF;
    PERFORM journal_entry_add(
        p_task => p_task, p_step => p_step,
        p_kind => CASE p_to
            WHEN 'runnable' THEN 'task_resumed'
            WHEN 'waiting' THEN 'task_waiting'
            WHEN 'awaiting_approval' THEN 'approval_requested'
            WHEN 'needs_human' THEN 'task_flagged'
            WHEN 'finished' THEN 'task_finished'
            WHEN 'compensated' THEN 'task_finished'
            WHEN 'cancelled' THEN 'task_cancelled'
        END,
        p_actor => p_actor, p_data => v_data);
    moved_from := v_was;
    RETURN NEXT;
END
$$;
