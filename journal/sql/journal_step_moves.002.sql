-- Retired (docs/design.md §4): a step moves only by journal_step_settle, journal_mark_unknown
-- and journal_attempt_start, each from an open state.
DROP TRIGGER IF EXISTS journal_step_moves ON journal_step;
DROP FUNCTION IF EXISTS journal_step_moves();
