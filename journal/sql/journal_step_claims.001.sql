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
CREATE OR REPLACE FUNCTION journal_step_claims() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.state IN ('pending', 'unknown') AND NEW.guard_key IS NOT NULL THEN
            INSERT INTO journal_object_live (guard_key, step_id) VALUES (NEW.guard_key, NEW.id);
        END IF;
        IF NEW.state IN ('pending', 'unknown', 'done') THEN
            IF NEW.once AND NEW.guard_key IS NOT NULL AND NEW.offset_by_id IS NULL THEN
                INSERT INTO journal_object_once (guard_key, step_id, task_id, key, tool, evidence, settled_at)
                VALUES (NEW.guard_key, NEW.id, NEW.task_id, NEW.key, NEW.tool,
                        COALESCE(NEW.outcome -> 'evidence', '{}'::jsonb), NEW.settled_at);
            END IF;
            IF NEW.offsets_id IS NOT NULL THEN
                INSERT INTO journal_step_undo (offsets_id, step_id) VALUES (NEW.offsets_id, NEW.id);
            END IF;
        END IF;
        RETURN NULL;
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
    RETURN NULL;
END
$$;

-- The WHEN clauses are written as PostgreSQL prints them back (tests/journal/test_sql_files.py):
-- only steps that act on an object or undo one, and only when their state or undo changes.
DROP TRIGGER IF EXISTS journal_step_claims_born ON journal_step;
CREATE TRIGGER journal_step_claims_born
    AFTER INSERT ON journal_step
    FOR EACH ROW
    WHEN (((new.guard_key IS NOT NULL) OR (new.offsets_id IS NOT NULL)))
    EXECUTE FUNCTION journal_step_claims();

DROP TRIGGER IF EXISTS journal_step_claims_moved ON journal_step;
CREATE TRIGGER journal_step_claims_moved
    AFTER UPDATE OF state, offset_by_id ON journal_step
    FOR EACH ROW
    WHEN ((((new.guard_key IS NOT NULL) OR (new.offsets_id IS NOT NULL))
           AND (((old.state)::text IS DISTINCT FROM (new.state)::text)
                OR (old.offset_by_id IS DISTINCT FROM new.offset_by_id))))
    EXECUTE FUNCTION journal_step_claims();
