-- What was seen about one step, written beside the move it came with (docs/design.md §4): the
-- lookup made, the attempt that ended, the provider's notification received. Not a move of
-- its own: journal_settle and journal_mark_unknown call it, so a note is always about the
-- step they move, of one of these kinds, and never says the step settled (only the move
-- does). p_notes: [{"kind", "actor", "data"}, ...], written in order. Returns how many.
CREATE OR REPLACE FUNCTION journal_step_notes(p_task uuid, p_step bigint, p_notes jsonb)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_note jsonb;
    v_count integer := 0;
BEGIN
    IF COALESCE(jsonb_typeof(p_notes), 'null') NOT IN ('array', 'null') THEN
        RAISE EXCEPTION 'notes about step % are a list', p_step USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR v_note IN SELECT n FROM jsonb_array_elements(COALESCE(p_notes, '[]'::jsonb))
                                WITH ORDINALITY AS a(n, i) ORDER BY i LOOP
        IF v_note->>'kind' IS NULL OR v_note->>'kind' NOT IN ('lookup', 'attempt_ended', 'webhook_received') THEN
            RAISE EXCEPTION 'a note about step % is a lookup, an attempt that ended or a notification received, not %',
                p_step, COALESCE(v_note->>'kind', 'nothing')
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        PERFORM journal_entry_add(
            p_task => p_task, p_step => p_step, p_kind => v_note->>'kind',
            p_actor => COALESCE(v_note->>'actor', ''), p_data => COALESCE(v_note->'data', '{}'::jsonb));
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END
$$;
