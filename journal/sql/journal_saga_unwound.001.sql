-- A saga starts compensating instead of going forward (docs/design.md §7), and never stops:
-- its done effects are undone, newest first. Not a move of its own: its runner starts it
-- (journal_saga_unwind), a person who rejects a held step or has it compensate does too.
-- Returns whether this call started it (it may already be unwinding).
CREATE OR REPLACE FUNCTION journal_saga_unwound(p_task uuid, p_reason text, p_actor text DEFAULT '')
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    UPDATE journal_task t SET unwinding = true, version = t.version + 1
     WHERE t.id = p_task AND NOT t.unwinding AND t.ended_as = '';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM journal_entry_add(p_task => p_task, p_step => NULL, p_kind => 'saga_unwinding',
                              p_actor => p_actor, p_data => jsonb_build_object('reason', p_reason));
    RETURN true;
END
$$;
