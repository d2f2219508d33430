-- Retired (docs/design.md §4): no app role may update, delete or truncate the journal's
-- tables (privileges); the owner, which could switch a trigger off, is trusted.
DROP TRIGGER IF EXISTS journal_entry_no_update_or_delete ON journal_entry;
DROP TRIGGER IF EXISTS journal_entry_no_truncate ON journal_entry;
DROP TRIGGER IF EXISTS journal_step_no_truncate ON journal_step;
DROP TRIGGER IF EXISTS journal_approval_no_truncate ON journal_approval;
DROP FUNCTION IF EXISTS journal_entry_append_only();
