-- The tool a step declared as its undo never changes (§7).
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
    BEFORE UPDATE ON journal_step
    FOR EACH ROW EXECUTE FUNCTION journal_step_undo_frozen();
