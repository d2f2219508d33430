-- Retired (docs/design.md §4, §7): a task's status changes only in journal_transition, which
-- holds the state machine and its conditions (a waiting task has a time, a task in front
-- of a person a code).
DROP TRIGGER IF EXISTS journal_task_rules ON journal_task;
DROP FUNCTION IF EXISTS journal_task_rules();
