-- A person's reason for what they do to a task, as the journal keeps it (docs/design.md §8):
-- trimmed, at most 2,000 characters, and required (SQLSTATE AO001 with the sentence to show).
-- Not a move of its own: every person's move that needs a reason asks it.
CREATE OR REPLACE FUNCTION journal_person_reason(p_reason text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF COALESCE(btrim(p_reason), '') = '' THEN
        RAISE EXCEPTION 'say why: the journal records every operator action''s reason'
            USING ERRCODE = 'AO001';
    END IF;
    RETURN left(btrim(p_reason), 2000);
END
$$;
