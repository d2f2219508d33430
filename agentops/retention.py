"""The journal's retention, run (docs/design.md §17; docs/operating/retention.md).

- by hand: ``manage.py journal_retain [--archive DIR] [--dry-run]``;
- every ``JOURNAL_RETENTION_INTERVAL_SECONDS`` (a day), by the job the sweeper rings
  (:func:`retention_sweep`), archiving to ``JOURNAL_ARCHIVE_DIR`` when that is set.

The journal drops a range whole once its tasks are over and untouched for the keep
(journal.retention); after it, what agentops keeps about that range's tasks follows: their
notifications' deliveries go, and an intent asked for over MCP loses the link to its task
(the intent itself, and the once-only claim its effect left, stay: asked again, it is
refused with the first effect's evidence), and operators' claims of its tasks and notes on
them go (not archived: a note may hold what a customer said). What agentops keeps beside
the journal goes by the same keep: a provider's notifications, and the audit's resolved
findings and its runs.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection

from agentops.doorbell import run_queue
from agentops.workers import RETENTION_JOB
from journal.models import Partition
from journal.retention import RetentionReport, partition_rows, retention_run

log = logging.getLogger("agentops.retention")

RANG_KEY = "agentops:retention:rang"
RETENTION_JOB_TIMEOUT_SECONDS = 3600


def archive_to(directory: Path) -> Callable[[Partition], Path]:
    """An archive of each range before it goes: ``journal-<name>.jsonl.gz`` in ``directory``,
    one JSON object a row (``{"table": …, "row": …}``), tasks first; written whole to a
    temporary name, flushed to disk, then renamed, so a file there is a complete one."""

    def archive(partition: Partition) -> Path:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        final = directory / f"journal-{partition.name}.jsonl.gz"
        partial = final.with_suffix(".partial")
        with open(partial, "wb") as raw:
            with gzip.open(raw, "wt", encoding="utf-8") as out:
                for table, row in partition_rows(partition):
                    out.write(json.dumps({"table": table, "row": json.loads(row)}) + "\n")
            raw.flush()
            os.fsync(raw.fileno())
        partial.replace(final)
        return final

    return archive


def beside_forget() -> dict[str, int]:
    """What agentops keeps beside the journal, let go as the journal's keep lets go
    (journal_retention_before): a provider's notifications received before it, the audit's
    findings resolved before it and its runs over before it with none left. Security
    definers, as the app: the keep is the owner's. How many of each went, by table."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT agentops_webhook_events_forget()")
        (events,) = cursor.fetchone()
        cursor.execute("SELECT findings, runs FROM agentops_audit_forget()")
        findings, runs = cursor.fetchone()
    return {
        "agentops_webhookevent": int(events),
        "agentops_audit_finding": int(findings),
        "agentops_audit_auditrun": int(runs),
    }


def journal_retain(*, archive_dir: Path | None = None) -> RetentionReport:
    """The journal's retention run, then agentops' own rows about what it dropped, and what
    agentops keeps beside the journal that is as old as the keep (:func:`beside_forget`)."""
    report = retention_run(archive=archive_to(archive_dir) if archive_dir else None)
    report.forgotten.update(beside_forget())
    for partition in report.dropped:
        with connection.cursor() as cursor:
            # The intent stays (its key is its memory); only the dropped task's link goes.
            cursor.execute(
                "UPDATE agentops_intentkey i SET task_id = NULL "
                "FROM journal_partition_dropped(p_name => %s) r "
                "WHERE i.task_id >= r.low AND i.task_id < r.high",
                [partition.name],
            )
            cursor.execute(
                "SELECT agentops_notifications_forget(p_partition => %s)", [partition.name]
            )
            # Who held its tasks and what operators noted on them (a note may hold what a
            # customer said): they go with the tasks, not archived.
            cursor.execute(
                "SELECT claims, notes FROM agentops_coordination_forget(p_partition => %s)",
                [partition.name],
            )
            claims, notes = cursor.fetchone()
        forgotten = report.forgotten
        forgotten["agentops_taskclaim"] = forgotten.get("agentops_taskclaim", 0) + int(claims)
        forgotten["agentops_taskcoordination"] = forgotten.get(
            "agentops_taskcoordination", 0
        ) + int(notes)
        log.info(
            "journal range %s dropped: %s tasks",
            partition.name,
            partition.tasks,
            extra={"partition": partition.name, "tasks": partition.tasks},
        )
    if any(report.forgotten.values()):
        log.info(
            "retention forgot %s",
            ", ".join(f"{n} of {table}" for table, n in report.forgotten.items()),
            extra={"forgotten": dict(report.forgotten)},
        )
    for kept in report.kept:
        log.info(
            "journal range %s kept: %s",
            kept.name,
            kept.reason,
            extra={"partition": kept.name, "reason": kept.reason},
        )
    return report


def retention_sweep() -> int:
    """What the sweeper does for retention, every sweep: ring for the retention job once per
    JOURNAL_RETENTION_INTERVAL_SECONDS, whichever sweeper sees it due first (a Redis key
    that lives that long; a Redis that lost it rings again sooner, which does no harm: a run
    drops only what may go). Returns the jobs rung."""
    interval = float(settings.JOURNAL_RETENTION_INTERVAL_SECONDS)
    if interval <= 0:
        return 0
    queue = run_queue()
    if not queue.connection.set(RANG_KEY, "1", nx=True, px=int(interval * 1000)):
        return 0
    options: dict[str, Any] = {
        "job_timeout": RETENTION_JOB_TIMEOUT_SECONDS,
        "result_ttl": 0,  # what it did is in journal_partition and the log
        "failure_ttl": 7 * 24 * 3600,
        "description": "the journal's retention",
    }
    queue.enqueue(RETENTION_JOB, **options)
    log.info("rang for the journal's retention", extra={"job": RETENTION_JOB})
    return 1


def report_lines(report: RetentionReport) -> list[str]:
    """What a run did, in sentences, for the command's output."""
    lines = [f"{report.made} partition(s) made ahead"]
    lines += [
        f"dropped {p.name} [{p.starts:%Y-%m-%d %H:%M:%S} – {p.ends:%Y-%m-%d %H:%M:%S} UTC): "
        f"{p.tasks} task(s)"
        for p in report.dropped
    ]
    lines += [f"kept {k.name} ({k.tasks} task(s)): {k.reason}" for k in report.kept]
    lines += [f"forgot {n} row(s) of {table}" for table, n in report.forgotten.items() if n]
    return lines
