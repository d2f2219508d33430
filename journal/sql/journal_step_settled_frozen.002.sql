-- Retired (docs/design.md §4): nothing but journal_step_settle touches a settled step, and
-- only to mark it undone.
DROP TRIGGER IF EXISTS journal_step_settled_frozen ON journal_step;
DROP FUNCTION IF EXISTS journal_step_settled_frozen();
