-- How a step moves (docs/design.md §4, §6): a settled step never changes state; a step is in
-- one of its four states, settled (settled_at) exactly when it is done or not_done, and its
-- counts are never negative (the rules CHECK constraints held before, which PostgreSQL reads
-- and plans again at every statement: §14; each raised as that constraint was, with its
-- name); it is marked undone once, on a done step, only by the done undo recorded as its own
-- undo. Only a write that names one of the columns these rules are about is looked at.
CREATE OR REPLACE FUNCTION journal_step_moves() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF OLD.state IN ('done', 'not_done') AND NEW.state IS DISTINCT FROM OLD.state THEN
        RAISE EXCEPTION 'step % is settled % and never moves (to %)', OLD.key, OLD.state, NEW.state
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.state IS NULL OR NEW.state NOT IN ('pending', 'unknown', 'done', 'not_done') THEN
        RAISE EXCEPTION 'step %: % is not a state of a step', OLD.key, NEW.state
            USING ERRCODE = 'check_violation', CONSTRAINT = 'journal_step_state_valid';
    END IF;
    IF (NEW.settled_at IS NULL) <> (NEW.state IN ('pending', 'unknown')) THEN
        RAISE EXCEPTION 'step %: it is settled (settled_at) exactly when it is done or not_done', OLD.key
            USING ERRCODE = 'check_violation', CONSTRAINT = 'journal_step_settled_at_iff_settled';
    END IF;
    IF NEW.attempts < 0 OR NEW.lookups < 0 THEN
        RAISE EXCEPTION 'step %: its counts are never negative', OLD.key
            USING ERRCODE = 'check_violation', CONSTRAINT = 'journal_step_counts_not_negative';
    END IF;
    IF NEW.offset_by_id IS DISTINCT FROM OLD.offset_by_id THEN
        IF OLD.offset_by_id IS NOT NULL OR NEW.state <> 'done' THEN
            RAISE EXCEPTION 'step %: only a done step is undone, and only once', OLD.key
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        IF NOT EXISTS (
            SELECT 1 FROM journal_step u
             WHERE u.id = NEW.offset_by_id AND u.task_id = OLD.task_id
               AND u.offsets_id = OLD.id AND u.state = 'done' AND u.kind = 'call'
               AND u.tool = OLD.undo_tool AND OLD.undo_tool <> ''
        ) THEN
            RAISE EXCEPTION 'step %: it is undone only by a done % of the same task recorded as its undo', OLD.key, NULLIF(OLD.undo_tool, '')
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS journal_step_moves ON journal_step;
CREATE TRIGGER journal_step_moves
    BEFORE UPDATE OF state, settled_at, attempts, lookups, offset_by_id ON journal_step
    FOR EACH ROW EXECUTE FUNCTION journal_step_moves();
