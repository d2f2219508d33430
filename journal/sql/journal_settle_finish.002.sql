-- Retired (docs/design.md §4, "One commit per step"): journal_finish takes the settlement
-- held back (p_settles) itself.
DROP FUNCTION IF EXISTS journal_settle_finish(bigint, text, text, jsonb, jsonb, uuid, bigint,
    float8, text, boolean, text, jsonb, jsonb, jsonb);
