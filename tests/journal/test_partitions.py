"""The journal's partitions (docs/design.md §17): made ahead, bounded by time as task ids are,
never overlapping, and the one rule for dropping one names the final statuses the state
machine does."""

from __future__ import annotations

import random
import re
import time
import uuid

import pytest
from django.db import connection

from journal.keys import task_id_new
from journal.models import Partition, Retention
from journal.sqlfiles import sql_newest
from journal.status import FINAL
from tests.databases import flag, owner_connection

pytestmark = pytest.mark.usefixtures("committed")

MAKE = "SELECT journal_partitions_make(p_from => to_timestamp(%s), p_until => to_timestamp(%s))"


def test_an_id_made_at_a_moment_lies_within_the_bounds_sql_gives_that_moment() -> None:
    rng = random.Random(19)  # noqa: S311 - moments, not secrets
    with connection.cursor() as cursor:
        for _ in range(200):
            at = rng.uniform(0, 4_000_000_000)
            made = task_id_new(at)
            cursor.execute(
                "SELECT journal_uuid_at(p_at => to_timestamp(%s)) <= %s "
                "AND %s < journal_uuid_at(p_at => to_timestamp(%s) + interval '1 millisecond')",
                [int(at * 1000) / 1000, made, made, int(at * 1000) / 1000],
            )
            assert cursor.fetchone()[0] is True, (at, made)
    assert task_id_new().version == 7


def test_the_ranges_ahead_exist_and_making_them_again_makes_none() -> None:
    retention = Retention.objects.get(pk=1)
    width = retention.partition_seconds
    with connection.cursor() as cursor:
        cursor.execute("SELECT journal_partitions_ensure()")
        assert cursor.fetchone()[0] == 0
        cursor.execute("SELECT now()")
        (now,) = cursor.fetchone()
    live = list(Partition.objects.filter(dropped_at__isnull=True, ends__gt=now).order_by("starts"))
    assert live[0].starts <= now < live[0].ends
    assert (live[-1].ends - now).total_seconds() >= width * retention.ahead
    for before, after in zip(live, live[1:], strict=False):
        assert before.ends <= after.starts, (before, after)


def test_a_range_of_another_width_starts_where_the_last_ends_and_never_overlaps() -> None:
    far = time.time() + 40 * 365 * 86400  # a future no other test uses
    with owner_connection().cursor() as cursor:
        cursor.execute(
            MAKE,
            [far, far + 1],
        )
        assert cursor.fetchone()[0] == 1
        cursor.execute(
            MAKE,
            [far, far + 1],
        )
        assert cursor.fetchone()[0] == 0
    made = Partition.objects.get(starts__lte=far_ts(far), ends__gt=far_ts(far))
    owner = owner_connection()
    kept = Retention.objects.using(owner.alias).get(pk=1)
    try:
        Retention.objects.using(owner.alias).filter(pk=1).update(partition_seconds=86400 * 3)
        with owner.cursor() as cursor:
            cursor.execute(
                "SELECT journal_partitions_make(p_from => %s, p_until => %s + interval '5 days')",
                [made.starts, made.ends],
            )
    finally:
        Retention.objects.using(owner.alias).filter(pk=1).update(
            partition_seconds=kept.partition_seconds
        )
    after = list(Partition.objects.filter(starts__gte=made.ends).order_by("starts")[:2])
    assert after[0].starts == made.ends
    assert (after[0].ends - after[0].starts).total_seconds() == 86400 * 3


def far_ts(at: float) -> object:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(at, tz=UTC)


def test_a_task_of_a_time_no_range_covers_lands_in_the_default_partition() -> None:
    from journal.operator import task_cancel
    from journal.record import task_create

    task = task_create(kind="renewal", goal="random id", task_id=uuid.uuid4())
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM journal_task WHERE id = %s", [task.pk])
        assert cursor.fetchone()[0] == "journal_task_default"
    # Over, so that no sweeper of another test rings for it.
    flag(task.pk, "rounds_exhausted", "a test's")
    task_cancel(task_id=task.pk, actor="test", reason="a test's")


def test_the_rule_for_dropping_a_range_names_the_final_statuses_of_the_state_machine() -> None:
    text = sql_newest()["journal_partition_expired"].text
    named = re.search(r"status NOT IN \(([^)]*)\)", text)
    assert named is not None
    assert set(re.findall(r"''(\w+)''", named.group(1))) == {str(s) for s in FINAL}


def test_the_apps_sessions_plan_the_journals_statements_once() -> None:
    """Planned again at every call otherwise (docs/design.md §17; agentops.settings)."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        assert cursor.fetchone()[0] == "force_generic_plan"
