-- Retired (docs/design.md §4): a step's declared undo is written once, by journal_record.
DROP TRIGGER IF EXISTS journal_step_undo_frozen ON journal_step;
DROP FUNCTION IF EXISTS journal_step_undo_frozen();
