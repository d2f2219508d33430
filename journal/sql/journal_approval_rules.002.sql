-- An approval is decided once and used once; what it approves never changes (§7). It is
-- deleted only with its task, by the journal's retention (journal_partition_drop, as the
-- tables' owner, while it drops the partition that holds the task: docs/design.md §17).
CREATE OR REPLACE FUNCTION journal_approval_rules() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('journal.retaining', true) <> ''
       AND OLD.task_id >= journal_uuid_at(p_at => (SELECT p.starts FROM journal_partition p
                                         WHERE p.name = current_setting('journal.retaining', true)))
       AND OLD.task_id < journal_uuid_at(p_at => (SELECT p.ends FROM journal_partition p
                                         WHERE p.name = current_setting('journal.retaining', true)))
       AND current_user = (SELECT r.rolname FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner
                            WHERE c.oid = TG_RELID) THEN
        RETURN OLD;
    END IF;
    IF TG_OP <> 'UPDATE' THEN
        RAISE EXCEPTION 'approvals are never deleted: % refused', TG_OP
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.task_id IS DISTINCT FROM OLD.task_id OR NEW.tool IS DISTINCT FROM OLD.tool
       OR NEW.args IS DISTINCT FROM OLD.args OR NEW.digest IS DISTINCT FROM OLD.digest
       OR NEW.reason IS DISTINCT FROM OLD.reason
       OR NEW.requested_at IS DISTINCT FROM OLD.requested_at
       OR NEW.expires_at IS DISTINCT FROM OLD.expires_at THEN
        RAISE EXCEPTION 'approval %: what it approves never changes', OLD.id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.state IS DISTINCT FROM OLD.state AND (OLD.state, NEW.state) NOT IN (
        ('pending', 'approved'), ('pending', 'rejected'), ('pending', 'expired'),
        ('approved', 'used'), ('approved', 'expired')
    ) THEN
        RAISE EXCEPTION 'approval %: % -> % is refused (an approval is decided once, used once)',
            OLD.id, OLD.state, NEW.state
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF OLD.state IN ('approved', 'rejected', 'used', 'expired')
       AND (NEW.decided_by IS DISTINCT FROM OLD.decided_by
            OR NEW.decided_at IS DISTINCT FROM OLD.decided_at) THEN
        RAISE EXCEPTION 'approval %: who decided, and when, never changes', OLD.id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS journal_approval_rules ON journal_approval;
CREATE TRIGGER journal_approval_rules
    BEFORE DELETE OR UPDATE ON journal_approval
    FOR EACH ROW EXECUTE FUNCTION journal_approval_rules();
