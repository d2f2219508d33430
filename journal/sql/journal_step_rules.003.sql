-- Retired (docs/design.md §4): no app role updates journal_step; the functions that settle
-- or mark a step unknown change only its outcome.
DROP TRIGGER IF EXISTS journal_step_frozen ON journal_step;
DROP FUNCTION IF EXISTS journal_step_rules();
