"""The reference: the journal's two durable commits per step, in plain psycopg.

Before the call, one commit inserts the step and its entry; after it, one commit settles
the step and writes its entry: the writes the journal must make, with nothing around them
(two statements per commit here; the journal sends each commit as one database function).
"""

from __future__ import annotations

import json
import time
import uuid

import psycopg

SETUP = [
    """CREATE TABLE IF NOT EXISTS bench_raw_step (
        id bigserial PRIMARY KEY, key text UNIQUE NOT NULL, state text NOT NULL,
        args jsonb NOT NULL, outcome jsonb)""",
    """CREATE TABLE IF NOT EXISTS bench_raw_entry (
        id bigserial PRIMARY KEY, step_id bigint NOT NULL, kind text NOT NULL,
        data jsonb NOT NULL)""",
]


def raw_steps_per_s(*, url: str, steps: int) -> float:
    """Steps per second of the two commits, one connection, prepared statements."""
    with psycopg.connect(url, autocommit=False, prepare_threshold=0) as conn:
        for statement in SETUP:
            conn.execute(statement, prepare=False)
        conn.commit()
        prefix = uuid.uuid4().hex
        args = json.dumps({"invoice": "INV-1", "amount": 4900})
        began = time.perf_counter()
        for i in range(steps):
            step_id = conn.execute(
                "INSERT INTO bench_raw_step (key, state, args) VALUES (%s, 'pending', %s) "
                "RETURNING id",
                [f"{prefix}:{i}", args],
            ).fetchone()[0]  # type: ignore[index]
            conn.execute(
                "INSERT INTO bench_raw_entry (step_id, kind, data) VALUES (%s, 'recorded', %s)",
                [step_id, args],
            )
            conn.commit()
            conn.execute(
                "UPDATE bench_raw_step SET state = 'done', outcome = %s WHERE id = %s",
                ['{"evidence": {"id": "x"}}', step_id],
            )
            conn.execute(
                "INSERT INTO bench_raw_entry (step_id, kind, data) VALUES (%s, 'settled', %s)",
                [step_id, '{"state": "done"}'],
            )
            conn.commit()
        return steps / (time.perf_counter() - began)


def raw_cleanup(*, url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_raw_step, bench_raw_entry")
