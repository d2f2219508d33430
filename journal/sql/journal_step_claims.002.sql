-- The guards (docs/design.md §6), kept beside the steps rather than as indexes on them, so
-- that settling a step changes no indexed column of journal_step (a HOT update). A step
-- that acts on an object, or undoes another step, holds claims while it stands or may:
--   journal_object_live  one effect in flight or unknown per object (pending, unknown);
--   journal_object_once  one once-only effect per object that happened or may have and was
--                        not undone (pending, unknown, done; kept for good, with its key,
--                        tool and evidence, so a second one is refused after old steps go);
--   journal_step_undo    one undo per step that stands or may (pending, unknown, done).
-- Each claim's primary key is the guard: a second claim is a unique violation named like
-- the guard (journal.models GUARD_CONSTRAINT, ONCE_CONSTRAINT, UNDO_CONSTRAINT), and the
-- step's insert fails with it. Security definer: the app role may only read the claims.
--
-- Taken as the row is written (BEFORE: its id is drawn already, and a write that fails after
-- takes its claims back with it), after the step's birth rules (journal_step_born sorts
-- first). A step that acts on no object returns at once: no WHEN clause, which PostgreSQL
-- would read and plan again at every statement (§14). A once-only effect's two claims are
-- one statement, the live one first (it reads what the other writes): a second effect on an
-- object whose first is still in flight is told so, not "already done". Its settlement (the
-- live claim given back, the evidence kept), one statement too.
CREATE OR REPLACE FUNCTION journal_step_claims() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF NEW.guard_key IS NULL AND NEW.offsets_id IS NULL THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'INSERT' THEN
        IF NEW.state IN ('pending', 'unknown') AND NEW.guard_key IS NOT NULL
           AND NEW.once AND NEW.offset_by_id IS NULL THEN
            WITH live AS (
                INSERT INTO journal_object_live (guard_key, step_id)
                VALUES (NEW.guard_key, NEW.id)
                RETURNING guard_key, step_id)
            INSERT INTO journal_object_once (guard_key, step_id, task_id, key, tool, evidence, settled_at)
            SELECT live.guard_key, live.step_id, NEW.task_id, NEW.key, NEW.tool,
                   COALESCE(NEW.outcome -> 'evidence', '{}'::jsonb), NEW.settled_at
              FROM live;
        ELSE
            IF NEW.state IN ('pending', 'unknown') AND NEW.guard_key IS NOT NULL THEN
                INSERT INTO journal_object_live (guard_key, step_id) VALUES (NEW.guard_key, NEW.id);
            END IF;
            IF NEW.state IN ('pending', 'unknown', 'done') AND NEW.once
               AND NEW.guard_key IS NOT NULL AND NEW.offset_by_id IS NULL THEN
                INSERT INTO journal_object_once (guard_key, step_id, task_id, key, tool, evidence, settled_at)
                VALUES (NEW.guard_key, NEW.id, NEW.task_id, NEW.key, NEW.tool,
                        COALESCE(NEW.outcome -> 'evidence', '{}'::jsonb), NEW.settled_at);
            END IF;
        END IF;
        IF NEW.state IN ('pending', 'unknown', 'done') AND NEW.offsets_id IS NOT NULL THEN
            INSERT INTO journal_step_undo (offsets_id, step_id) VALUES (NEW.offsets_id, NEW.id);
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.state IS NOT DISTINCT FROM OLD.state
       AND NEW.offset_by_id IS NOT DISTINCT FROM OLD.offset_by_id THEN
        RETURN NEW;
    END IF;
    IF OLD.state IN ('pending', 'unknown') AND NEW.state = 'done' AND NEW.once
       AND NEW.guard_key IS NOT NULL
       AND NEW.offset_by_id IS NOT DISTINCT FROM OLD.offset_by_id THEN
        -- A once-only effect done: its live claim given back, its evidence kept.
        WITH gone AS (
            DELETE FROM journal_object_live l
             WHERE l.guard_key = NEW.guard_key AND l.step_id = NEW.id)
        UPDATE journal_object_once o
           SET evidence = COALESCE(NEW.outcome -> 'evidence', '{}'::jsonb),
               settled_at = NEW.settled_at
         WHERE o.guard_key = NEW.guard_key AND o.step_id = NEW.id;
        RETURN NEW;
    END IF;
    IF OLD.state IN ('pending', 'unknown') AND NEW.state NOT IN ('pending', 'unknown')
       AND NEW.guard_key IS NOT NULL THEN
        DELETE FROM journal_object_live l WHERE l.guard_key = NEW.guard_key AND l.step_id = NEW.id;
    END IF;
    IF NEW.state = 'not_done' AND OLD.state IS DISTINCT FROM 'not_done' THEN
        DELETE FROM journal_object_once o WHERE o.guard_key = NEW.guard_key AND o.step_id = NEW.id;
        DELETE FROM journal_step_undo u WHERE u.offsets_id = NEW.offsets_id AND u.step_id = NEW.id;
    ELSIF NEW.state = 'done' AND OLD.state IS DISTINCT FROM 'done' AND NEW.once THEN
        UPDATE journal_object_once o
           SET evidence = COALESCE(NEW.outcome -> 'evidence', '{}'::jsonb),
               settled_at = NEW.settled_at
         WHERE o.guard_key = NEW.guard_key AND o.step_id = NEW.id;
    END IF;
    IF NEW.offset_by_id IS NOT NULL AND OLD.offset_by_id IS NULL THEN
        -- Undone: the object's once-only effect may happen again.
        DELETE FROM journal_object_once o WHERE o.guard_key = NEW.guard_key AND o.step_id = NEW.id;
    END IF;
    RETURN NEW;
END
$$;

-- Before the row is written; journal_step_born's checks sort first among the insert's
-- triggers. No WHEN clause: the function returns at once for a step that claims nothing.
DROP TRIGGER IF EXISTS journal_step_claims_born ON journal_step;
CREATE TRIGGER journal_step_claims_born
    BEFORE INSERT ON journal_step
    FOR EACH ROW EXECUTE FUNCTION journal_step_claims();

DROP TRIGGER IF EXISTS journal_step_claims_moved ON journal_step;
CREATE TRIGGER journal_step_claims_moved
    BEFORE UPDATE OF state, offset_by_id ON journal_step
    FOR EACH ROW EXECUTE FUNCTION journal_step_claims();
