"""A range of the journal dropped by its retention takes its tasks' claims and notes with it
(docs/operating/retention.md; a note may hold what a customer told an operator):
``agentops_coordination_forget(p_partition)``, a security definer the retention job calls as
the app, deletes the claims and the coordination rows (claims, releases, take-overs, notes) of
the tasks of a range the journal has dropped, and of no other (the app's role may delete none
itself)."""

from django.db import migrations

FORGET = r"""
CREATE OR REPLACE FUNCTION agentops_coordination_forget(p_partition text)
RETURNS TABLE (claims bigint, notes bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_low uuid;
    v_high uuid;
BEGIN
    claims := 0;
    notes := 0;
    SELECT r.low, r.high INTO v_low, v_high FROM journal_partition_dropped(p_name => p_partition) r;
    IF NOT FOUND THEN
        RETURN NEXT;  -- not a range the journal has dropped: nothing of it goes
        RETURN;
    END IF;
    DELETE FROM agentops_taskclaim c WHERE c.task_id >= v_low AND c.task_id < v_high;
    GET DIAGNOSTICS claims = ROW_COUNT;
    DELETE FROM agentops_taskcoordination n WHERE n.task_id >= v_low AND n.task_id < v_high;
    GET DIAGNOSTICS notes = ROW_COUNT;
    RETURN NEXT;
END
$$;
"""


class Migration(migrations.Migration):
    # devtools/expand_contract.py: why the version running before it keeps working.
    compatible = "a new function that only the retention job of this version calls"

    dependencies = [
        ("agentops", "0010_task_claims_and_notes"),
        ("journal", "0024_what_moves_return"),
    ]

    operations = [
        migrations.RunSQL(FORGET, "DROP FUNCTION agentops_coordination_forget(text)"),
    ]
