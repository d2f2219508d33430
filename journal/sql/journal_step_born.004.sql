-- Retired (docs/design.md §4): a step is inserted only by journal_record (pending or
-- refused, under the lease of a runnable task), journal_finish and journal_step_correct.
DROP TRIGGER IF EXISTS journal_step_born ON journal_step;
DROP FUNCTION IF EXISTS journal_step_born();
