-- Retired (docs/design.md §7): a plan is written once, by journal_task_create, and unwinding
-- only starts (journal_saga_unwound).
DROP TRIGGER IF EXISTS journal_task_saga_rules ON journal_task;
DROP FUNCTION IF EXISTS journal_task_saga_rules();
