-- Retired (docs/design.md §4, "The journal's API is its functions"): no app role writes
-- journal_approval; journal_approval_request, _approve, _reject, _expire and _spend are the
-- only writers, each checking its own preconditions.
DROP TRIGGER IF EXISTS journal_approval_rules ON journal_approval;
DROP TRIGGER IF EXISTS journal_approval_no_truncate ON journal_approval;
DROP FUNCTION IF EXISTS journal_approval_rules();
