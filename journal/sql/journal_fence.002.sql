-- Retired (docs/design.md §11): the lease check is journal_hold, which also writes the
-- settlement a runner held back.
DROP FUNCTION IF EXISTS journal_fence(uuid, bigint, float8, integer, boolean, boolean);
