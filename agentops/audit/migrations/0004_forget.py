"""What the audit found is kept while it matters (docs/design.md §17):
``agentops_audit_forget()``, a security definer the retention job calls as the app, deletes
the findings a person resolved before the journal's keep lets go
(journal_retention_before), then the audit runs that ended before it with no finding left.
An open finding stays, however old, and so does its run: nobody has looked at it yet."""

from django.db import migrations

FORGET = r"""
CREATE OR REPLACE FUNCTION agentops_audit_forget(OUT findings bigint, OUT runs bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_before timestamptz := journal_retention_before();
BEGIN
    findings := 0;
    runs := 0;
    IF v_before IS NULL THEN
        RETURN;  -- the journal is kept for good, and so is what the audit found
    END IF;
    DELETE FROM agentops_audit_finding f
     WHERE f.resolved_at IS NOT NULL AND f.resolved_at < v_before;
    GET DIAGNOSTICS findings = ROW_COUNT;
    DELETE FROM agentops_audit_auditrun r
     WHERE r.started_at < v_before AND (r.finished_at IS NULL OR r.finished_at < v_before)
       AND NOT EXISTS (SELECT 1 FROM agentops_audit_finding f WHERE f.run_id = r.id);
    GET DIAGNOSTICS runs = ROW_COUNT;
END
$$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("agentops_audit", "0003_journal_unconstrained"),
        ("journal", "0017_retention_before"),
    ]

    operations = [
        migrations.RunSQL(FORGET, "DROP FUNCTION agentops_audit_forget()"),
    ]
