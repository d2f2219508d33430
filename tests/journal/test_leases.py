"""One runner per task (docs/design.md §11), across real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from devtools.database import database_url
from journal.leases import LeaseLost, lease_acquire, lease_call
from journal.models import Step, Task
from journal.record import task_create
from tests.databases import as_owner

pytestmark = pytest.mark.usefixtures("committed")

ROOT = Path(__file__).resolve().parents[2]


class Runner:
    """A lease holder in another process, driven line by line (tests/journal/lease_holder)."""

    def __init__(self, task: Task) -> None:
        env = {**os.environ, "DATABASE_URL": database_url()}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.journal.lease_holder", str(task.pk)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def said(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def tell(self, command: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
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


def _ready(task: Task, count: int, runners: list[Runner]) -> list[Runner]:
    started = [Runner(task) for _ in range(count)]
    runners.extend(started)
    assert [r.said() for r in started] == ["ready"] * count  # start-up done before any lease
    return started


def _time_passes_for_the_lease(task: Task) -> None:
    """The holder stalls (a GC pause, a slow provider) past its lease: as the database judges
    time, its lease has run out. Moved by the test rather than waited for, so that no load on
    the machine can make a lease outlive or undercut the test's steps."""
    as_owner(
        "UPDATE journal_task SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
        [task.pk],
    )


def test_a_stale_holder_cannot_write_after_another_process_took_the_lease(
    runners: list[Runner],
) -> None:
    task = task_create(kind="renewal", goal="charge")
    first, second, third = _ready(task, 3, runners)
    assert first.tell("acquire 30") == "acquired 1"

    # While the first holder's lease lives, nobody else gets it.
    assert second.tell("acquire 30") == "busy"

    # The first holder stalls past its lease...
    _time_passes_for_the_lease(task)
    assert third.tell("acquire 30") == "acquired 2"
    assert third.tell("write") == "wrote 1"

    # ... and when it wakes up, the journal refuses its write.
    assert first.tell("write") == "lease_lost"
    assert Step.objects.filter(task=task).count() == 1
    task.refresh_from_db()
    assert task.lease_token == 2 and task.step_count == 1


def test_only_one_of_many_processes_racing_for_a_lease_gets_it(runners: list[Runner]) -> None:
    task = task_create(kind="renewal", goal="charge")
    racers = _ready(task, 4, runners)
    for racer in racers:  # all asked before any answer is read: they race in the database
        assert racer.proc.stdin is not None
        racer.proc.stdin.write("acquire 30\n")
        racer.proc.stdin.flush()
    said = sorted(r.said() for r in racers)
    assert said == ["acquired 1", "busy", "busy", "busy"]


def test_the_same_holder_can_be_fenced_in_process_too() -> None:
    task = task_create(kind="renewal", goal="charge")
    old = lease_acquire(task_id=task.pk, owner="old", seconds=30)
    assert old is not None
    _time_passes_for_the_lease(task)
    new = lease_acquire(task_id=task.pk, owner="new")
    assert new is not None and new.token == old.token + 1
    with pytest.raises(LeaseLost):
        lease_call(old, "journal_lease_renew")
    assert lease_call(new, "journal_lease_renew").held_steps == 0


def test_a_holder_stopped_inside_a_transaction_does_not_keep_its_task_past_its_lease(
    runners: list[Runner],
) -> None:
    """A runner paused (SIGSTOP, a frozen VM, a debugger) between a write's first statement
    and its commit holds the task's row lock: every runner that takes the task up would wait
    for it, however long. The server ends a session idle in a transaction for as long as a
    lease lasts; its write rolls back, and the task goes on."""
    task = task_create(kind="renewal", goal="charge")
    [paused] = _ready(task, 1, runners)
    # Leases as long as the settings' (2 s in the tests): the stop outlasts it.
    assert paused.tell("acquire 2") == "acquired 1"
    assert paused.tell("hold") == "holding"  # the fence's extension is not committed
    os.kill(paused.proc.pid, signal.SIGSTOP)
    try:
        # The server ends the stopped session after a lease (2 s): both limits are ten times
        # more than the task takes to be free.
        with connection.cursor() as cursor:
            # Without the server's limit, this would wait until the holder woke up.
            cursor.execute("SET lock_timeout = '30s'")
        deadline = time.monotonic() + 30
        taken = None
        while taken is None:
            assert time.monotonic() < deadline, "the task stayed with the stopped runner"
            taken = lease_acquire(task_id=task.pk, owner="next")
            time.sleep(0.1)
        assert taken.token == 2
    finally:
        os.kill(paused.proc.pid, signal.SIGCONT)
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
    assert paused.tell("commit") == "database_lost"  # it learns when it wakes up
