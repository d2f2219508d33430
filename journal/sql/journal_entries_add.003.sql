-- Retired (docs/design.md §4): no app role writes entries of its choosing; each move writes
-- its own, and notes beside a move are journal_step_notes'.
DROP FUNCTION IF EXISTS journal_entries_add(jsonb);
