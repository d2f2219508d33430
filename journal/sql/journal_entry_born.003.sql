-- Retired (docs/design.md §4): entries are written only by the journal's functions, each
-- about the task and step it moves.
DROP TRIGGER IF EXISTS journal_entry_born ON journal_entry;
DROP TRIGGER IF EXISTS journal_entry_born_at_commit ON journal_entry;
DROP FUNCTION IF EXISTS journal_entry_born();
