"""The soak: does a step cost the same when the journal is large as when it is new?

Waves of renewals (``wave_tasks`` each) through two RQ workers and the sandbox providers,
one after another against a growing journal. After each wave: its throughput and latency
percentiles, every process's memory and CPU a task, the journal's tables and indexes, dead
tuples, the share of HOT updates of the steps in that wave, Redis's keys, the server's
background work (WAL, checkpoints, autovacuums) and the CPU the hypervisor took for others
(devtools/bench/host.py); then the journal's retention, as its daily job runs it
(agentops.retention.journal_retain). At the end, the last five waves against the first
five, and the first wave's first invoice asked for again after its task's range was dropped:
refused, naming its charge, and nothing sent.

``make soak`` runs it with the journal's ranges a few seconds wide and kept half a minute
(JOURNAL_PARTITION_SECONDS, JOURNAL_RETAIN_SECONDS), so that retention drops ranges while it
runs, as it would over months.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from django.db import connection

from agentops.doorbell import run_queue
from agentops.effects import task_start
from agentops.retention import journal_retain
from devtools.bench import e2e
from devtools.bench.host import Steal
from devtools.bench.stats import percentile, soak_drift
from journal.models import Step, Task

# The providers forget what is older than this (their --retain-seconds): a long soak must
# show their memory bounded, as a demo left running for weeks needs it to be.
SANDBOX_RETAIN_SECONDS = 120


def journal_sizes() -> dict[str, Any]:
    """Each journal table's size, its indexes' and its dead tuples, partitions summed."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT root.relname,
                   sum(pg_table_size(t.relid))::bigint,
                   sum(pg_indexes_size(t.relid))::bigint,
                   COALESCE(sum(s.n_dead_tup), 0)::bigint,
                   COALESCE(sum(s.n_live_tup), 0)::bigint,
                   COALESCE(sum(s.n_tup_upd), 0)::bigint,
                   COALESCE(sum(s.n_tup_hot_upd), 0)::bigint
              FROM pg_class root
              CROSS JOIN LATERAL pg_partition_tree(root.oid) t
              LEFT JOIN pg_stat_user_tables s ON s.relid = t.relid
             WHERE root.relname IN ('journal_task', 'journal_step', 'journal_entry')
               AND root.relkind IN ('r', 'p')
             GROUP BY root.relname
            """
        )
        rows = cursor.fetchall()
    return {
        name: {
            "table_mb": round(table / 2**20, 2),
            "indexes_mb": round(indexes / 2**20, 2),
            "dead_tuples": dead,
            "live_tuples": live,
            "updates": updates,
            "hot_updates": hot,
        }
        for name, table, indexes, dead, live, updates, hot in rows
    }


def server_activity() -> dict[str, Any]:
    """What the server has done in the background so far: the WAL written (its position),
    checkpoints, and the autovacuums and autoanalyzes of every table."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT pg_current_wal_lsn()::text,
                   (SELECT num_timed + num_requested FROM pg_stat_checkpointer),
                   (SELECT COALESCE(sum(autovacuum_count), 0)::bigint FROM pg_stat_all_tables),
                   (SELECT COALESCE(sum(autoanalyze_count), 0)::bigint FROM pg_stat_all_tables)
            """
        )
        lsn, checkpoints, vacuums, analyzes = cursor.fetchone()
    return {
        "lsn": lsn,
        "checkpoints": checkpoints,
        "autovacuums": vacuums,
        "autoanalyzes": analyzes,
    }


def activity_between(start: dict[str, Any], end: dict[str, Any], tasks: int) -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_wal_lsn_diff(%s, %s)", [end["lsn"], start["lsn"]])
        wal = float(cursor.fetchone()[0])
    return {
        "wal_kb_per_task": round(wal / 1024 / tasks, 2),
        **{
            name: end[name] - start[name] for name in ("checkpoints", "autovacuums", "autoanalyzes")
        },
    }


def soak(*, waves: int, wave_tasks: int, say: Callable[[str], None]) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    redis = run_queue().connection
    dropped_partitions = dropped_tasks = 0
    first_invoice = ""
    with (
        e2e.sandboxes("--retain-seconds", str(SANDBOX_RETAIN_SECONDS)) as world,
        e2e.workers(world, 2),
    ):
        e2e.batch_run(world, tasks=20, tag="warm")
        before = journal_sizes()
        for wave in range(1, waves + 1):
            began = time.time()
            steal, server = Steal(), server_activity()
            batch = e2e.batch_run(world, tasks=wave_tasks, tag=f"soak-{wave}")
            stolen, background = (
                steal.share(),
                activity_between(server, server_activity(), wave_tasks),
            )
            if wave == 1:
                first_invoice = Task.objects.get(pk=batch.task_ids[0]).refs["invoice"]
            sizes = journal_sizes()
            step_updates = sizes["journal_step"]["updates"] - before["journal_step"]["updates"]
            hot = sizes["journal_step"]["hot_updates"] - before["journal_step"]["hot_updates"]
            before = sizes
            retained = journal_retain()
            dropped_partitions += len(retained.dropped)
            dropped_tasks += retained.tasks_dropped
            row: dict[str, Any] = {
                "wave": wave,
                "began": round(began, 1),
                "tasks": wave_tasks,
                "tasks_per_s": round(batch.tasks_per_s, 1),
                "latency_ms": {
                    "p50": round(percentile(batch.latency_ms, 50), 1),
                    "p95": round(percentile(batch.latency_ms, 95), 1),
                    "p99": round(percentile(batch.latency_ms, 99), 1),
                },
                "cpu_ms_per_task": batch.cpu_ms_per_task,
                "host_steal_share": stolen,
                "server": background,
                "memory_mb": world.roles.memory_mb(),
                "journal": sizes,
                "step_hot_update_share": round(hot / step_updates, 3) if step_updates else None,
                "redis_keys": int(redis.dbsize()),
                "retention": {
                    "dropped_partitions": len(retained.dropped),
                    "dropped_tasks": retained.tasks_dropped,
                    "tasks_in_journal": Task.objects.count(),
                },
            }
            rows.append(row)
            say(
                f"wave {wave}/{waves}: {row['tasks_per_s']} tasks/s, p95 "
                f"{row['latency_ms']['p95']} ms, workers "
                + ", ".join(
                    f"{v} MB" for k, v in row["memory_mb"].items() if k.startswith("worker")
                )
                + f", {row['retention']['tasks_in_journal']} tasks in the journal"
            )
        again = refused_again(world, first_invoice)
    summary = soak_summary(rows)
    summary["retention"] = {
        "dropped_partitions": dropped_partitions,
        "dropped_tasks": dropped_tasks,
        "first_invoice_asked_again": again,
    }
    return {"waves": rows, "summary": summary}


def soak_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The last five waves against the first five: throughput, latency, how memory moved,
    and what a task cost each process beside the sandboxes' own cost (stats.soak_drift)."""
    first, last = rows[:5], rows[-5:]

    def mean(values: list[float]) -> float:
        return statistics.fmean(values)

    def rss(wave: dict[str, Any], prefix: str) -> float:
        memory: dict[str, float] = wave["memory_mb"]
        return sum(v for k, v in memory.items() if k.startswith(prefix))

    out: dict[str, Any] = {
        "tasks": sum(r["tasks"] for r in rows),
        "throughput_last5_over_first5": round(
            mean([r["tasks_per_s"] for r in last]) / mean([r["tasks_per_s"] for r in first]), 3
        ),
        "p95_ms_first5": round(mean([r["latency_ms"]["p95"] for r in first]), 1),
        "p95_ms_last5": round(mean([r["latency_ms"]["p95"] for r in last]), 1),
    }
    for role in ("worker", "payments", "mail", "postgres", "redis", "bench"):
        start = mean([rss(r, role) for r in first])
        end = mean([rss(r, role) for r in last])
        out[f"{role}_mb_first5"] = round(start, 1)
        out[f"{role}_mb_last5"] = round(end, 1)
        out[f"{role}_growth"] = round(end / start - 1, 3) if start else None
    out["drift"] = soak_drift(rows)
    return out


def refused_again(world: e2e.World, invoice: str) -> dict[str, Any]:
    """The first wave's first invoice, renewed again at the end: what became of its charge,
    whether its first task is still in the journal, and how many charges of it the provider
    made since (nothing, if nothing was sent)."""
    from sandbox.client import SandboxClient

    payments = SandboxClient(world.providers["STRIPE_API_BASE"])
    first_task_kept = Task.objects.filter(refs__invoice=invoice).exists()
    since = time.time()
    task = task_start(
        kind="renewal",
        goal=f"bench: renew {invoice} again",
        refs={"invoice": invoice, "amount": 4900, "email": "b@e.ch"},
    )
    deadline = time.monotonic() + 60
    while Task.objects.get(pk=task.pk).status not in ("finished", "needs_human"):
        if time.monotonic() > deadline:
            raise RuntimeError("the renewal asked for again did not end within a minute")
        time.sleep(0.05)
    charge = Step.objects.get(task=task, tool="charge_customer")
    sent = [
        e
        for e in payments.ledger(operation="payment_intents.create")
        if e["at"] >= since and (e["params"].get("metadata") or {}).get("invoice") == invoice
    ]
    return {
        "invoice": invoice,
        "first_task_in_journal": first_task_kept,
        "state": charge.state,
        "refusal": charge.refusal,
        "first_evidence": charge.outcome.get("first_evidence"),
        "charges_sent": len(sent),
    }
