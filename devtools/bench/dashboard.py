"""The operators' pages over a large journal: 100,000 tasks and 1,000,000 entries.

The journal is filled in a few statements (generate_series), then the task list and a
200-step task's page are rendered through Django, as a logged-in operator, and timed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext

from agentops.dbroles import OWNER_ALIAS
from devtools.bench.stats import percentile

SEED_TASKS = """
INSERT INTO journal_task (id, kind, goal, refs, status, attention, attention_code, wake_at,
    step_count, created_at, lease_owner, lease_token, failed_runs, plan, unwinding, shortfall,
    version)
SELECT md5('bench' || i || %(tag)s)::uuid, 'renewal', 'bench: a seeded renewal ' || i,
       jsonb_build_object('invoice', 'SEED-' || %(tag)s || '-' || i, 'amount', 4900),
       CASE WHEN i %% 50 = 0 THEN 'needs_human' WHEN i %% 97 = 0 THEN 'waiting'
            ELSE 'finished' END,
       CASE WHEN i %% 50 = 0 THEN 'rounds used up' ELSE '' END,
       CASE WHEN i %% 50 = 0 THEN 'rounds_exhausted' ELSE '' END,
       CASE WHEN i %% 97 = 0 AND i %% 50 <> 0 THEN now() + interval '1 hour' END,
       2, now() - (i || ' seconds')::interval, '', 0, 0, '[]'::jsonb, false, false, 0
  FROM generate_series(1, %(tasks)s) AS i
"""

# Steps are born pending (the database refuses any other way in, migration 0009), then
# settled, as the harness does.
SEED_STEPS = """
INSERT INTO journal_step (task_id, n, kind, tool, args, key, cost, guard, once, retries,
    refusal, undo_tool, state, detail, outcome, attempts, lookups, first_started_at,
    key_trusted_until, lookup_until, decision, created_at)
SELECT t.id, n, 'call', 'charge_customer', jsonb_build_object('amount', 4900),
       'ao:' || t.id || ':' || n, 'full', NULL, false, 0, '', '', 'pending', '', '{}'::jsonb,
       1, 0, t.created_at, t.created_at + interval '21 hours', t.created_at + interval '24 hours',
       '{}'::jsonb, t.created_at
  FROM journal_task t, generate_series(1, %(steps)s) AS n
 WHERE t.goal LIKE 'bench: a seeded renewal %%' AND t.refs->>'invoice' LIKE %(like)s;
UPDATE journal_step s
   SET state = CASE WHEN t.status = 'finished' OR s.n = 1 THEN 'done' ELSE 'unknown' END,
       outcome = '{"evidence": {"charge": "ch_seed"}}'::jsonb,
       settled_at = CASE WHEN t.status = 'finished' OR s.n = 1 THEN t.created_at END,
       next_check_at = CASE WHEN t.status <> 'finished' AND s.n = 2
                            THEN now() + interval '1 hour' END
  FROM journal_task t
 WHERE s.task_id = t.id AND t.goal LIKE 'bench: a seeded renewal %%'
   AND t.refs->>'invoice' LIKE %(like)s
"""

SEED_ENTRIES = """
INSERT INTO journal_entry (task_id, step_id, kind, at, actor, data)
SELECT s.task_id, s.id, 'step_settled', s.created_at + (k || ' ms')::interval, '',
       jsonb_build_object('state', s.state, 'k', k)
  FROM journal_step s, generate_series(1, %(per_step)s) AS k
 WHERE s.key LIKE 'ao:%%' AND s.task_id IN (
       SELECT id FROM journal_task WHERE refs->>'invoice' LIKE %(like)s)
"""


def _owner() -> str:
    return OWNER_ALIAS if OWNER_ALIAS in settings.DATABASES else DEFAULT_DB_ALIAS


@contextmanager
def _history() -> Iterator[Any]:
    """A cursor that may write history in bulk: as the tables' owner, in one transaction (the
    seeded tasks are over; their steps are written after the fact, as no move of the
    journal's would write them)."""
    owner = _owner()
    with transaction.atomic(using=owner), connections[owner].cursor() as cursor:
        yield cursor


def seed(*, tasks: int = 100_000, entries: int = 1_000_000) -> None:
    """Fill the journal: ``tasks`` tasks of two steps, ``entries`` entries among them."""
    tag = uuid.uuid4().hex[:6]
    like = f"SEED-{tag}-%"
    with _history() as cursor:
        cursor.execute(SEED_TASKS, {"tag": tag, "tasks": tasks})
        cursor.execute(SEED_STEPS, {"steps": 2, "like": like})
        cursor.execute(SEED_ENTRIES, {"per_step": max(1, entries // (tasks * 2)), "like": like})
    # Statistics for the planner, gathered by the tables' owner (the app's role may not).
    with connections[_owner()].cursor() as cursor:
        cursor.execute("ANALYZE journal_task; ANALYZE journal_step; ANALYZE journal_entry")


def long_task(*, steps: int = 200) -> uuid.UUID:
    """One task of ``steps`` settled steps, five entries each."""
    task_id = uuid.uuid4()
    with _history() as cursor:
        cursor.execute(
            """
            INSERT INTO journal_task (id, kind, goal, refs, status, attention, attention_code,
                step_count, created_at, lease_owner, lease_token, failed_runs, plan,
                unwinding, shortfall, version)
            VALUES (%s, 'renewal', 'bench: a long task', '{"invoice": "LONG"}', 'finished',
                    '', '', %s, now(), '', 0, 0, '[]', false, false, 0)
            """,
            [task_id, steps],
        )
        cursor.execute(
            """
            INSERT INTO journal_step (task_id, n, kind, tool, args, key, cost, once, retries,
                refusal, undo_tool, state, detail, outcome, attempts, lookups,
                first_started_at, key_trusted_until, lookup_until, decision, created_at)
            SELECT %s, n, 'call', 'send_email', jsonb_build_object('n', n),
                   'ao:' || %s || ':' || n, 'full', false, 0, '', '', 'pending', '', '{}',
                   1, 0, now(), now() + interval '21 hours', now() + interval '24 hours',
                   '{}', now()
              FROM generate_series(1, %s) AS n
            """,
            [task_id, str(task_id), steps],
        )
        cursor.execute(
            """
            UPDATE journal_step
               SET state = 'done', outcome = '{"evidence": {"message": "msg_seed"}}',
                   settled_at = now()
             WHERE task_id = %s
            """,
            [task_id],
        )
        cursor.execute(
            """
            INSERT INTO journal_entry (task_id, step_id, kind, at, actor, data)
            SELECT s.task_id, s.id, kinds.kind, now() + (kinds.o || ' ms')::interval, '',
                   jsonb_build_object('attempt', 1, 'state', 'done', 'classified', 'done')
              FROM journal_step s,
                   (VALUES ('step_recorded', 0), ('attempt_ended', 5), ('lookup', 6),
                           ('attempt_started', 7), ('step_settled', 9)) AS kinds(kind, o)
             WHERE s.task_id = %s
            """,
            [task_id],
        )
    return task_id


def render_ms(*, path: str, times: int = 30) -> dict[str, Any]:
    """p50/p95 milliseconds to render ``path`` for a logged-in operator, and its queries."""
    user, _ = get_user_model().objects.get_or_create(
        username="bench-operator", defaults={"is_superuser": True, "is_staff": True}
    )
    client = Client(HTTP_HOST="127.0.0.1")  # an allowed host, as a browser would send
    client.force_login(user)
    client.get(path)  # warm: templates compiled, caches filled
    samples = []
    for _ in range(times):
        began = time.perf_counter()
        response = client.get(path)
        samples.append((time.perf_counter() - began) * 1000)
        if response.status_code != 200:
            raise RuntimeError(f"{path} answered {response.status_code}")
    with CaptureQueriesContext(connection) as queries:
        client.get(path)
    return {
        "p50": round(percentile(samples, 50), 1),
        "p95": round(percentile(samples, 95), 1),
        "queries": len(queries.captured_queries),
    }
