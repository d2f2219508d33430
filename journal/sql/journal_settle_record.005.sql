-- Retired (docs/design.md §4, "One commit per step"): journal_record takes the settlement
-- held back (p_settles) itself.
DROP FUNCTION IF EXISTS journal_settle_record(bigint, text, text, jsonb, jsonb, uuid, bigint,
    float8, text, jsonb, jsonb, jsonb, boolean, text, text, text, boolean, integer, integer,
    text, float8, float8);
