"""A provider's notifications are kept as long as the journal keeps its tasks, not for good
(docs/design.md §17): ``agentops_webhook_events_forget()``, a security definer the retention
job calls as the app, deletes the events received before the journal's keep lets go
(journal_retention_before: the owner's keep, which the app cannot change), and no other. An
event's id is its one-time memory only while a provider may still send it again: a provider
re-sends an event for days, not months, each time signed anew, and one applied again after it
was forgotten changes nothing (a step settles once)."""

from django.db import migrations, models

FORGET = r"""
CREATE OR REPLACE FUNCTION agentops_webhook_events_forget() RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_before timestamptz := journal_retention_before();
    v_gone bigint;
BEGIN
    IF v_before IS NULL THEN
        RETURN 0;  -- the journal is kept for good, and so are they
    END IF;
    DELETE FROM agentops_webhookevent e WHERE e.received_at < v_before;
    GET DIAGNOSTICS v_gone = ROW_COUNT;
    RETURN v_gone;
END
$$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0007_journal_unconstrained"),
        ("journal", "0017_retention_before"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="webhookevent",
            index=models.Index(fields=["received_at"], name="agentops_webhook_received"),
        ),
        migrations.RunSQL(FORGET, "DROP FUNCTION agentops_webhook_events_forget()"),
    ]
