-- The tool a step declared as its undo never changes (§7). Only a write that names the column
-- can change it (no trigger on the table changes a row), so only such a write is looked at.
CREATE OR REPLACE FUNCTION journal_step_undo_frozen() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF NEW.undo_tool IS DISTINCT FROM OLD.undo_tool THEN
        RAISE EXCEPTION 'step %: its declared undo never changes', OLD.key
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS journal_step_undo_frozen ON journal_step;
CREATE TRIGGER journal_step_undo_frozen
    BEFORE UPDATE OF undo_tool ON journal_step
    FOR EACH ROW EXECUTE FUNCTION journal_step_undo_frozen();
