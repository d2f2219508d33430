-- A settled step is frozen whole: outcome and evidence, detail, timestamps, counters and
-- the decision; only its undo link (offset_by_id) may still be set, by journal_step_rules'
-- rule (docs/design.md §4).
CREATE OR REPLACE FUNCTION journal_step_settled_frozen() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF OLD.state IN ('done', 'not_done')
       AND (to_jsonb(NEW) - '{offset_by_id}'::text[]) IS DISTINCT FROM (to_jsonb(OLD) - '{offset_by_id}'::text[]) THEN
        RAISE EXCEPTION 'step % is settled % and frozen: its outcome, evidence, timestamps and decision never change', OLD.key, OLD.state
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS journal_step_settled_frozen ON journal_step;
CREATE TRIGGER journal_step_settled_frozen
    BEFORE UPDATE ON journal_step
    FOR EACH ROW EXECUTE FUNCTION journal_step_settled_frozen();
