"""A range of the journal dropped by its retention takes its tasks' deliveries with it (docs/
design.md §17): ``agentops_notifications_forget(p_partition)``, a security definer the
retention job calls as the app, deletes the deliveries of the tasks of a range the journal
has dropped, and of no other (the app's role may delete none itself)."""

from django.db import migrations

FORGET = r"""
CREATE OR REPLACE FUNCTION agentops_notifications_forget(p_partition text) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_low uuid;
    v_high uuid;
    v_gone bigint;
BEGIN
    SELECT r.low, r.high INTO v_low, v_high FROM journal_partition_dropped(p_name => p_partition) r;
    IF NOT FOUND THEN
        RETURN 0;  -- not a range the journal has dropped: nothing of it goes
    END IF;
    DELETE FROM agentops_notifications_delivery d
     WHERE d.task_id >= v_low AND d.task_id < v_high;
    GET DIAGNOSTICS v_gone = ROW_COUNT;
    RETURN v_gone;
END
$$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("agentops_notifications", "0002_journal_unconstrained"),
        ("journal", "0015_partitions"),
    ]

    operations = [
        migrations.RunSQL(FORGET, "DROP FUNCTION agentops_notifications_forget(text)"),
    ]
