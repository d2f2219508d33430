-- The lease check (docs/design.md §11), the first thing every move under a lease does: checks
-- the token, extends the lease, takes the task row's lock until commit and bumps its version.
-- Not a move of its own (no app role may call it); every lease move calls it first.
--
-- p_settles is the settlement the runner held back (docs/design.md §4, "One commit per step":
-- {"step", "state", "detail", "outcome", "entry"}), written here, before the move it came
-- with, so that a step's outcome is durable before the next write of its runner, in the same
-- statement. settled says what became of it: NULL (none held), 'settled', 'repeat' (a report
-- had settled it the same way meanwhile: the attempt is noted) or 'conflict' (a report had
-- settled it the other way: the conflict is recorded and the task handed to a person, and
-- the move must not go on: ok is false).
--
-- With p_steps, numbers the steps about to be written, if the task is runnable (p_runnable)
-- and not unwinding (p_forward); ok says whether it is. No row: the lease was taken over, and
-- nothing was changed. version_was is the task's version before this statement: its holder
-- knows whether anyone else wrote since its own last write.
CREATE OR REPLACE FUNCTION journal_hold(
    p_task uuid, p_token bigint, p_lease float8, p_settles jsonb DEFAULT NULL,
    p_steps integer DEFAULT 0, p_runnable boolean DEFAULT false, p_forward boolean DEFAULT false)
RETURNS TABLE (ok boolean, held_steps integer, held_status text, version_was bigint,
               held_version bigint, settled text)
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_changed boolean;
    v_state text;
BEGIN
    UPDATE journal_task t
       SET lease_expires_at = now() + make_interval(secs => p_lease),
           step_count = t.step_count
               + CASE WHEN (NOT p_runnable OR t.status = 'runnable')
                           AND (NOT p_forward OR NOT t.unwinding) THEN p_steps ELSE 0 END,
           version = t.version + 1
     WHERE t.id = p_task AND t.lease_token = p_token
    RETURNING (NOT p_runnable OR t.status = 'runnable') AND (NOT p_forward OR NOT t.unwinding),
              t.step_count, t.status, t.version
         INTO ok, held_steps, held_status, held_version;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    version_was := held_version - 1;
    IF p_settles IS NOT NULL THEN
        SELECT s.changed, s.step_state INTO v_changed, v_state
          FROM journal_step_settle(
              p_step => (p_settles->>'step')::bigint, p_task => p_task, p_task_status => held_status,
              p_state => p_settles->>'state', p_detail => COALESCE(p_settles->>'detail', ''),
              p_outcome => COALESCE(p_settles->'outcome', '{}'::jsonb),
              p_entry => COALESCE(p_settles->'entry', '{}'::jsonb), p_via => 'attempt',
              p_attempt => true) s;
        settled := CASE WHEN v_changed THEN 'settled'
                        WHEN v_state = p_settles->>'state' THEN 'repeat'
                        ELSE 'conflict' END;
        IF settled = 'conflict' THEN
            -- Nothing is written on top of an outcome that did not stand: a number taken
            -- for a step is given back.
            UPDATE journal_task t
               SET step_count = t.step_count - CASE WHEN ok THEN p_steps ELSE 0 END
             WHERE t.id = p_task
            RETURNING t.step_count, t.status, t.version INTO held_steps, held_status, held_version;
            ok := false;
        END IF;
    END IF;
    RETURN NEXT;
END
$$;
