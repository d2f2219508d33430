"""The journal's retention (issue 19; docs/design.md §17): a range of time whose tasks are all over
and untouched for the keep is dropped whole, and what the guards need for good stays — an
invoice paid in a dropped range is refused a second charge, with the first charge's evidence,
and the provider's ledger shows one charge.

Each test makes its own range in the past (as the owner may: ``journal_partitions_make``) and
tasks in it through the real code (the runner, the tools, the sandbox), with ids of that time,
so that a retention run can drop only what the test made. The keep is shrunk, not faked: a
second, waited for as a condition.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction
from django.test import override_settings

from agentops.doorbell import run_queue
from agentops.effects import task_start
from agentops.retention import RANG_KEY, journal_retain, report_lines, retention_sweep
from journal.keys import task_id_new
from journal.models import Partition, Retention, Step, Task
from journal.record import task_create
from journal.retention import partition_expired, retention_configure
from journal.summary import evidence_label
from tests.agentops.test_business_effects import charges_of, renewal_refs, run
from tests.agentops.workers import quiet_world
from tests.databases import flag, owner_connection
from tests.journal.support import invoice
from tests.sandbox.fixtures import SandboxHandle, wait_for

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")

KEEP = 1.0  # seconds: a range goes once nothing happened to its tasks for this long


@pytest.fixture
def world(committed: None, on_sandbox: dict[str, Any]) -> Iterator[None]:
    redis = quiet_world()
    with override_settings(**on_sandbox, TOOL_TIMEOUT_SECONDS=1.0, PLANNER="scripted"):
        yield
    redis.flushdb()


@pytest.fixture
def short_keep() -> Iterator[None]:
    """The keep shrunk to a second, as the owner sets it; the settings' again afterwards."""
    owner = owner_connection().alias
    before = Retention.objects.using(owner).get(pk=1)
    retention_configure(
        using=owner,
        partition_seconds=before.partition_seconds,
        ahead=before.ahead,
        keep_seconds=KEEP,
    )
    try:
        yield
    finally:
        retention_configure(
            using=owner,
            partition_seconds=before.partition_seconds,
            ahead=before.ahead,
            keep_seconds=before.keep_seconds,
        )


_days_back = iter(range(400, 4000, 30))


def past_range() -> tuple[Partition, float]:
    """A range of the past made for this test alone (the owner's function), and a moment in it."""
    at = time.time() - next(_days_back) * 86400
    with owner_connection().cursor() as cursor:
        cursor.execute(
            "SELECT journal_partitions_make("
            "p_from => to_timestamp(%s), p_until => to_timestamp(%s))",
            [at, at + 1],
        )
        cursor.execute(
            "SELECT name FROM journal_partition WHERE starts <= to_timestamp(%s) "
            "AND ends > to_timestamp(%s)",
            [at, at],
        )
        (name,) = cursor.fetchone()
    return Partition.objects.get(pk=name), at


def renewal_then(at: float, inv: str) -> Task:
    """A renewal made at ``at`` (its id of that time), run to its end by the real runner."""
    task = task_create(
        kind="renewal", goal=f"renew {inv}", refs=renewal_refs(inv), task_id=task_id_new(at)
    )
    run(task)
    return Task.objects.get(pk=task.pk)


def partition_of(task_id: Any) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM journal_task WHERE id = %s", [task_id])
        return str(cursor.fetchone()[0])


def droppable(partition: Partition) -> None:
    wait_for(
        lambda: partition_expired(partition.name)[1] is None,
        timeout=30 * KEEP,
        what=f"range {partition.name} to be past the keep",
    )


def test_a_task_lives_in_the_range_of_the_time_its_id_was_made() -> None:
    now = task_create(kind="renewal", goal="now", refs=renewal_refs(invoice()))
    partition = Partition.objects.get(starts__lte=now.created_at, ends__gt=now.created_at)
    assert partition_of(now.pk) == f"journal_task_{partition.name}"
    # The id's time and the range's bounds agree (Python makes ids, SQL bounds ranges).
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT journal_uuid_at(p_at => %s) <= %s AND %s < journal_uuid_at(p_at => %s)",
            [partition.starts, now.pk, now.pk, partition.ends],
        )
        assert cursor.fetchone()[0] is True


@pytest.mark.usefixtures("world", "short_keep")
def test_a_dropped_range_takes_its_tasks_and_a_paid_invoice_stays_refused(
    payments_sandbox: SandboxHandle, tmp_path: Path
) -> None:
    partition, at = past_range()
    inv = invoice()
    paid = renewal_then(at, inv)
    assert paid.status == "finished"
    assert partition_of(paid.pk) == f"journal_task_{partition.name}"
    charge = Step.objects.get(task=paid, tool="charge_customer")
    assert charge.state == "done"
    evidence = charge.evidence
    # Another task of that time, with a person: the range stays while it is not over.
    flagged = task_create(
        kind="renewal", goal="with a person", refs=renewal_refs(invoice()), task_id=task_id_new(at)
    )
    flag(flagged.pk, "rounds_exhausted", "a person looks at it")
    wait_for(lambda: partition_expired(partition.name)[1] is not None, timeout=5, what="kept")
    assert "1 of its 2 tasks are not over" in (partition_expired(partition.name)[1] or "")
    report = journal_retain()
    assert partition.name not in [p.name for p in report.dropped]
    assert any(k.name == partition.name and "not over" in k.reason for k in report.kept)
    assert Task.objects.filter(pk=paid.pk).exists()

    # Once that task is over too and the keep has passed, the range goes, archived first.
    from journal.operator import task_cancel

    task_cancel(task_id=flagged.pk, actor="operator:ada", reason="not needed")
    droppable(partition)
    report = journal_retain(archive_dir=tmp_path)
    assert [p.name for p in report.dropped] == [partition.name]
    assert report.dropped[0].tasks == 2
    assert not Task.objects.filter(pk__in=[paid.pk, flagged.pk]).exists()
    assert not Step.objects.filter(task_id=paid.pk).exists()
    assert Partition.objects.get(pk=partition.name).dropped_at is not None
    with owner_connection().cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [f"journal_task_{partition.name}"])
        assert cursor.fetchone()[0] is None
    with gzip.open(tmp_path / f"journal-{partition.name}.jsonl.gz", "rt") as archived:
        rows = [json.loads(line) for line in archived]
    assert {r["row"]["id"] for r in rows if r["table"] == "journal_task"} == {
        str(paid.pk),
        str(flagged.pk),
    }
    assert any(r["table"] == "journal_step" and r["row"]["key"] == charge.key for r in rows)
    assert any(r["table"] == "journal_entry" for r in rows)

    # The invoice is asked for again: refused, naming the first charge, and nothing is sent.
    again = task_start(kind="renewal", goal=f"renew {inv} again", refs=renewal_refs(inv))
    run(again)
    refused = Step.objects.get(task=again, tool="charge_customer")
    assert refused.state == "not_done" and refused.refusal == "already_done"
    assert evidence_label(evidence) in refused.detail
    assert refused.outcome["first_evidence"] == evidence
    assert [c["params"]["metadata"]["invoice"] for c in charges_of(payments_sandbox, inv)] == [inv]


@pytest.mark.usefixtures("world", "short_keep")
def test_a_range_with_a_step_in_flight_or_still_recent_activity_stays() -> None:
    partition, at = past_range()
    task = task_create(
        kind="renewal", goal="long ago", refs=renewal_refs(invoice()), task_id=task_id_new(at)
    )
    # Over, but a person touched it just now: the keep counts from the last thing written.
    from journal.operator import task_cancel

    flag(task.pk, "rounds_exhausted", "look")
    task_cancel(task_id=task.pk, actor="operator:ada", reason="done with")
    tasks, reason = partition_expired(partition.name)
    assert tasks == 1 and reason is not None and "written" in reason
    droppable(partition)
    assert partition_expired(partition.name) == (1, None)


@pytest.mark.usefixtures("committed")
def test_with_no_keep_nothing_is_due_and_the_present_is_never_due(short_keep: None) -> None:
    partition = Partition.objects.filter(dropped_at__isnull=True).order_by("-ends").first()
    assert partition is not None
    tasks, reason = partition_expired(partition.name)
    assert reason is not None and "less than the retention" in reason
    owner = owner_connection().alias
    kept = Retention.objects.using(owner).get(pk=1)
    retention_configure(
        using=owner, partition_seconds=kept.partition_seconds, ahead=kept.ahead, keep_seconds=None
    )
    partition_old, _ = past_range()
    assert "kept for good" in (partition_expired(partition_old.name)[1] or "")


@pytest.mark.usefixtures("committed", "short_keep")
def test_the_apps_role_drops_only_what_the_rule_allows() -> None:
    partition, at = past_range()
    task = task_create(
        kind="renewal", goal="long ago", refs=renewal_refs(invoice()), task_id=task_id_new(at)
    )
    refused = [
        (
            "SELECT journal_partitions_make(p_from => now(), p_until => now() + interval '1 year')",
            "permission denied",
        ),
        (f"DROP TABLE journal_task_{partition.name}", "must be owner"),
        (
            f"ALTER TABLE journal_task DETACH PARTITION journal_task_{partition.name}",
            "must be owner",
        ),
        ("UPDATE journal_retention SET keep_seconds = 0", "permission denied"),
        (
            "INSERT INTO journal_partition (name, starts, ends) VALUES ('x', now(), now())",
            "permission denied",
        ),
        (f"SELECT * FROM journal_task_{partition.name}", "permission denied"),
    ]
    for statement, why in refused:
        with pytest.raises(DatabaseError, match=why), transaction.atomic():
            connection.cursor().execute(statement)
    # An approval of the range's task is not deleted, whatever the app sets.
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT set_config('journal.retaining', %s, true)", [partition.name])
        cursor.execute("DELETE FROM journal_approval WHERE task_id = %s", [task.pk])
    # The drop it may call asks the rule: a runnable task keeps its range.
    with connection.cursor() as cursor:
        cursor.execute("SELECT journal_partition_drop(p_name => %s)", [partition.name])
        assert cursor.fetchone()[0] is None
    assert Task.objects.filter(pk=task.pk).exists()


@pytest.mark.usefixtures("committed")
@override_settings(JOURNAL_RETENTION_INTERVAL_SECONDS=24 * 3600.0)
def test_the_sweeper_rings_for_retention_once_a_day() -> None:
    redis = run_queue().connection
    redis.delete(RANG_KEY)
    queue = run_queue()
    queue.empty()
    assert retention_sweep() == 1
    assert retention_sweep() == 0
    assert [job.func_name for job in queue.jobs] == ["agentops.jobs.journal_retain"]
    assert 0 < redis.pttl(RANG_KEY) <= 24 * 3600 * 1000
    queue.empty()
    redis.delete(RANG_KEY)
    with override_settings(JOURNAL_RETENTION_INTERVAL_SECONDS=0):
        assert retention_sweep() == 0  # 0: never rung, only by hand


@pytest.mark.usefixtures("committed", "short_keep")
def test_a_dropped_range_takes_its_tasks_claims_and_notes_and_no_others() -> None:
    """Who held a task and what operators noted on it (a note may hold what a customer said)
    go with the task's range; a task of another range keeps its own."""
    from agentops.models import TaskClaim, TaskCoordination
    from agentops.operators.claims import task_claim, task_note, task_release
    from journal.operator import task_cancel

    partition, at = past_range()
    old = task_create(
        kind="renewal", goal="long ago", refs=renewal_refs(invoice()), task_id=task_id_new(at)
    )
    other = task_create(kind="renewal", goal="now", refs=renewal_refs(invoice()))
    for task in (old, other):
        task_claim(task_id=task.pk, actor="ada")
        task_note(task_id=task.pk, actor="ada", text="Customer phoned: +44 20 7946 0000")
    task_release(task_id=old.pk, actor="ada")
    task_claim(task_id=old.pk, actor="bob")
    flag(old.pk, "rounds_exhausted", "a person looks at it")
    task_cancel(task_id=old.pk, actor="operator:bob", reason="not needed")
    assert TaskCoordination.objects.filter(task_id=old.pk).count() == 4

    # The app's role cannot delete them itself, nor may its function outside a dropped range.
    for table in ("agentops_taskclaim", "agentops_taskcoordination"):
        with pytest.raises(DatabaseError, match="permission denied"), transaction.atomic():
            connection.cursor().execute(f"DELETE FROM {table} WHERE task_id = %s", [old.pk])  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT claims, notes FROM agentops_coordination_forget(p_partition => %s)",
            [partition.name],
        )
        assert cursor.fetchone() == (0, 0)  # not dropped yet: nothing of it goes
    assert TaskClaim.objects.filter(task_id=old.pk).exists()

    droppable(partition)
    report = journal_retain()
    assert partition.name in [p.name for p in report.dropped]
    assert not TaskClaim.objects.filter(task_id=old.pk).exists()
    assert not TaskCoordination.objects.filter(task_id=old.pk).exists()
    assert report.forgotten["agentops_taskclaim"] == 1
    assert report.forgotten["agentops_taskcoordination"] == 4
    assert "forgot 4 row(s) of agentops_taskcoordination" in report_lines(report)
    # The present task's claim and note stay.
    assert TaskClaim.objects.get(task_id=other.pk).holder == "ada"
    assert TaskCoordination.objects.filter(task_id=other.pk).count() == 2
