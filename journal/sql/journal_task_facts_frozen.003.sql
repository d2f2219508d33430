-- Retired (docs/design.md §4): a task's kind, goal and references are written once, by
-- journal_task_create; no app role updates or deletes a task.
DROP TRIGGER IF EXISTS journal_task_facts_frozen ON journal_task;
DROP TRIGGER IF EXISTS journal_task_no_truncate ON journal_task;
DROP FUNCTION IF EXISTS journal_task_facts_frozen();
