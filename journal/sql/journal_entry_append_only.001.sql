-- Entries, steps, tasks and approvals are never deleted or truncated, and entries never
-- updated (docs/design.md §4): whatever the code does, the owner included.
CREATE OR REPLACE FUNCTION journal_entry_append_only() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'journal entries are append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;

DROP TRIGGER IF EXISTS journal_entry_no_update_or_delete ON journal_entry;
CREATE TRIGGER journal_entry_no_update_or_delete
    BEFORE DELETE OR UPDATE ON journal_entry
    FOR EACH ROW EXECUTE FUNCTION journal_entry_append_only();

DROP TRIGGER IF EXISTS journal_entry_no_truncate ON journal_entry;
CREATE TRIGGER journal_entry_no_truncate
    BEFORE TRUNCATE ON journal_entry
    FOR EACH STATEMENT EXECUTE FUNCTION journal_entry_append_only();

DROP TRIGGER IF EXISTS journal_step_no_truncate ON journal_step;
CREATE TRIGGER journal_step_no_truncate
    BEFORE TRUNCATE ON journal_step
    FOR EACH STATEMENT EXECUTE FUNCTION journal_entry_append_only();

DROP TRIGGER IF EXISTS journal_approval_no_truncate ON journal_approval;
CREATE TRIGGER journal_approval_no_truncate
    BEFORE TRUNCATE ON journal_approval
    FOR EACH STATEMENT EXECUTE FUNCTION journal_entry_append_only();
