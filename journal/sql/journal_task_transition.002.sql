-- Retired (docs/design.md §7): the state machine is the table journal_status_move, read by
-- journal_transition, the one place a status changes.
DROP TRIGGER IF EXISTS journal_task_state_machine ON journal_task;
DROP FUNCTION IF EXISTS journal_task_transition();
