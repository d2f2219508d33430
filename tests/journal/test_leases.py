"""One runner per task (DESIGN §11), across real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from journal.leases import LeaseLost, fence, lease_acquire
from journal.models import Step, Task
from journal.record import task_create

pytestmark = pytest.mark.usefixtures("committed")

ROOT = Path(__file__).resolve().parents[2]


def _database_url() -> str:
    s = connection.settings_dict
    password = f":{s['PASSWORD']}" if s["PASSWORD"] else ""
    return f"postgres://{s['USER']}{password}@{s['HOST']}:{s['PORT']}/{s['NAME']}"


class Runner:
    """A lease holder in another process, driven line by line."""

    def __init__(self, task: Task, seconds: float) -> None:
        env = {**os.environ, "DATABASE_URL": _database_url()}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.journal.lease_holder", str(task.pk), str(seconds)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def said(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def write(self) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write("write\n")
        self.proc.stdin.flush()
        return self.said()

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture
def runners() -> Iterator[list[Runner]]:
    started: list[Runner] = []
    yield started
    for r in started:
        r.close()


def _wait_until_expired(task: Task, deadline: float = 10.0) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT lease_expires_at <= now() FROM journal_task WHERE id = %s", [task.pk]
            )
            if cursor.fetchone()[0]:
                return
        time.sleep(0.05)
    raise AssertionError("the lease never expired")


def test_a_stale_holder_cannot_write_after_another_process_took_the_lease(
    runners: list[Runner],
) -> None:
    task = task_create(kind="renewal", goal="charge")
    first = Runner(task, seconds=0.5)
    runners.append(first)
    assert first.said() == "acquired 1"

    # While the first holder's lease lives, nobody else gets it.
    second = Runner(task, seconds=30)
    runners.append(second)
    assert second.said() == "busy"

    # The first holder stalls (a GC pause, a slow provider) past its lease...
    _wait_until_expired(task)
    third = Runner(task, seconds=30)
    runners.append(third)
    assert third.said() == "acquired 2"
    assert third.write() == "wrote 1"

    # ... and when it wakes up, the journal refuses its write.
    assert first.write() == "lease_lost"
    assert Step.objects.filter(task=task).count() == 1
    task.refresh_from_db()
    assert task.lease_token == 2 and task.step_count == 1


def test_only_one_of_many_processes_racing_for_a_lease_gets_it(runners: list[Runner]) -> None:
    task = task_create(kind="renewal", goal="charge")
    racers = [Runner(task, seconds=30) for _ in range(4)]
    runners.extend(racers)
    said = sorted(r.said() for r in racers)
    assert said == ["acquired 1", "busy", "busy", "busy"]


def test_the_same_holder_can_be_fenced_in_process_too() -> None:
    task = task_create(kind="renewal", goal="charge")
    old = lease_acquire(task_id=task.pk, owner="old", seconds=0.01)
    assert old is not None
    _wait_until_expired(task)
    new = lease_acquire(task_id=task.pk, owner="new")
    assert new is not None and new.token == old.token + 1
    with pytest.raises(LeaseLost):
        fence(old)
    assert fence(new) == 0
