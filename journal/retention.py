"""The journal's retention (docs/design.md §17): its partitions made ahead, and the ranges whose
tasks are all over and untouched for the keep dropped whole, never a row deleted.

The rules live in SQL (``journal/sql/journal_partitions_ensure``, ``journal_partition_expired``,
``journal_partition_drop``); this calls them. What the guards need for good, the once-only
claims (``journal_object_once``, with each effect's key, tool and evidence), no range holds:
a paid invoice is refused again however long ago its task was dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import OperationalError, connection, connections, transaction

from journal.calls import call
from journal.models import Partition, Retention

TABLES = ("journal_task", "journal_step", "journal_entry")
# Which column of each table holds its task's id (the partition key).
TASK_COLUMN = {"journal_task": "id", "journal_step": "task_id", "journal_entry": "task_id"}


@dataclass(frozen=True)
class RangeKept:
    """A range that could have gone by its age, and why it stays."""

    name: str
    ends: datetime
    tasks: int
    reason: str


@dataclass
class RetentionReport:
    made: int = 0
    """Partitions made ahead."""
    dropped: list[Partition] = field(default_factory=list)
    kept: list[RangeKept] = field(default_factory=list)
    forgotten: dict[str, int] = field(default_factory=dict)
    """Rows the apps keep beside the journal that went by the same keep, by table."""

    @property
    def tasks_dropped(self) -> int:
        return sum(p.tasks or 0 for p in self.dropped)


def retention_configure(
    *, using: str, partition_seconds: float, ahead: int, keep_seconds: float | None
) -> None:
    """Set how wide a new partition is, how many are made ahead, and how long a range is kept
    once over (None: for good). Only the tables' owner can (``using`` is its connection):
    ``migrate`` runs it from the settings. A partition made before keeps its width."""
    if partition_seconds <= 0:
        raise ValueError("a partition's width is positive")
    if keep_seconds is not None and keep_seconds < 0:
        raise ValueError("the keep is not negative")
    Retention.objects.using(using).update_or_create(
        pk=1,
        defaults={
            "partition_seconds": float(partition_seconds),
            "ahead": int(ahead),
            "keep_seconds": None if keep_seconds is None else float(keep_seconds),
        },
    )


def partitions_ensure(*, using: str = "default") -> int:
    """Make the partitions of now, the range before and the configured number ahead, as far
    as they are missing; how many were made. Anyone may (the app does, daily)."""
    return int(call("journal_partitions_ensure", using=using))


def partitions_due() -> list[Partition]:
    """The ranges old enough to go by their end alone (kept for good: none), oldest first;
    whether each may go is :func:`partition_expired`'s answer."""
    keep = Retention.objects.values_list("keep_seconds", flat=True).first()
    if keep is None:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.name FROM journal_partition p WHERE p.dropped_at IS NULL "
            "AND p.ends <= now() - make_interval(secs => %s) ORDER BY p.starts",
            [keep],
        )
        names = [row[0] for row in cursor.fetchall()]
    return list(Partition.objects.filter(name__in=names).order_by("starts"))


def partition_expired(name: str) -> tuple[int, str | None]:
    """How many tasks partition ``name`` holds, and why it may not be dropped (None: it may)."""
    row = call("journal_partition_expired", name=name)
    return int(row.tasks), row.reason


def partition_drop(name: str) -> int | None:
    """Drop partition ``name`` if it may go now (asked again under the journal's locks); how
    many tasks went, or None if it stays (also when the journal was too busy to be locked
    within the function's lock_timeout: the next run tries again)."""
    try:
        with transaction.atomic():
            dropped = call("journal_partition_drop", name=name)
    except OperationalError:  # lock_not_available
        return None
    return None if dropped is None else int(dropped)


def partition_rows(partition: Partition, *, using: str = "default") -> Iterator[tuple[str, str]]:
    """Every row of the range, as (table, the row as JSON), tasks first: what an archive
    keeps of it before it is dropped. Read through the tables, as the app may."""
    with connections[using].cursor() as cursor:
        for table in TABLES:
            column = TASK_COLUMN[table]
            cursor.execute(
                f"SELECT row_to_json(r)::text FROM {table} r "  # noqa: S608 - our own names
                f"WHERE r.{column} >= journal_uuid_at(p_at => %s) "
                f"AND r.{column} < journal_uuid_at(p_at => %s) ORDER BY r.{column}",
                [partition.starts, partition.ends],
            )
            for (row,) in cursor:
                yield table, row


def retention_run(*, archive: Callable[[Partition], Any] | None = None) -> RetentionReport:
    """The daily run: partitions made ahead, then every range that may go dropped, oldest
    first, each after ``archive`` (if given) has kept it; a range that may not go yet stays,
    with its reason. An archive that fails stops its range from going."""
    report = RetentionReport(made=partitions_ensure())
    for partition in partitions_due():
        tasks, reason = partition_expired(partition.name)
        if reason is not None:
            report.kept.append(RangeKept(partition.name, partition.ends, tasks, reason))
            continue
        if archive is not None:
            archive(partition)
        if partition_drop(partition.name) is None:
            tasks, reason = partition_expired(partition.name)
            report.kept.append(
                RangeKept(partition.name, partition.ends, tasks, reason or "it could not be locked")
            )
            continue
        report.dropped.append(Partition.objects.get(pk=partition.name))
    return report
