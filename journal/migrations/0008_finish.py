"""Finishing a task in one statement, like recording and settling a step.

``journal_finish`` fences the lease, numbers the finish step, moves the task from
``runnable`` to ``finished`` (or ``compensated``), gives the lease back, and writes the
finish step and its entry. It returns nothing when the lease was taken over or the task is
no longer runnable, and then writes nothing (before, the finish step could be written for a
task that somebody had meanwhile cancelled).
"""

from django.db import migrations

FUNCTIONS = r"""
CREATE FUNCTION journal_finish(
    p_task uuid, p_token bigint, p_to text, p_shortfall boolean, p_detail text,
    p_outcome jsonb, p_decision jsonb, p_entry jsonb)
RETURNS TABLE (step_id bigint, step_n integer, task_version bigint)
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE journal_task
       SET step_count = step_count + 1, status = p_to, wake_at = NULL, attention = '',
           attention_code = '', shortfall = p_shortfall, lease_expires_at = NULL,
           lease_owner = '', lease_taken_at = NULL, failed_runs = 0, version = version + 1
     WHERE id = p_task AND lease_token = p_token AND status = 'runnable'
    RETURNING step_count, version INTO step_n, task_version;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO journal_step (
        task_id, n, kind, tool, args, key, cost, once, retries, undo_tool, refusal, state,
        detail, outcome, attempts, lookups, settled_at, decision, created_at)
    VALUES (
        p_task, step_n, 'finish', '', '{}', 'ao:' || p_task || ':' || step_n, '', false, 0,
        '', '', 'done', p_detail, p_outcome, 0, 0, now(), p_decision, now())
    RETURNING id INTO step_id;
    INSERT INTO journal_entry (task_id, step_id, kind, at, actor, data)
    VALUES (p_task, step_id, 'task_finished', now(), '',
            p_entry || jsonb_build_object('from', 'runnable', 'to', p_to));
    RETURN NEXT;
END
$$;
"""

UNFUNCTIONS = r"""
DROP FUNCTION journal_finish(uuid, bigint, text, boolean, text, jsonb, jsonb, jsonb);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("journal", "0007_hot_path"),
    ]

    operations = [migrations.RunSQL(FUNCTIONS, UNFUNCTIONS)]
