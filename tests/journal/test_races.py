"""Races between a webhook, a lookup and the runner never strand a task (issue 7).

Reproduced deterministically: the runner's transaction is held open at the exact point the
race needs, the webhook's statement is seen waiting on it in ``pg_stat_activity``, and only
then does the runner commit. No sleeps decide the order.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection, transaction

from journal.leases import lease_acquire, lease_release
from journal.models import Step, Task
from journal.outcomes import Outcome
from journal.record import step_record, task_create
from journal.selectors import task_list_runnable
from journal.settle import step_mark_unknown, step_settle
from tests.journal.support import ChargeTool, Provider, charge, invoice

pytestmark = pytest.mark.usefixtures("committed")


def _waiting_on_a_lock(pid: int, deadline: float = 10.0) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        with connection.cursor() as cursor:
            cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
            row = cursor.fetchone()
        if row is not None and row[0] == "Lock":
            return
        time.sleep(0.01)
    raise AssertionError(f"backend {pid} never waited on a lock")


def test_a_webhook_settling_while_the_runner_marks_the_task_waiting_wakes_the_task() -> None:
    task = task_create(kind="renewal", goal="race")
    lease = lease_acquire(task_id=task.pk, owner="runner")
    assert lease is not None
    step = step_record(
        lease=lease, decision=charge(invoice()), tools={"charge": ChargeTool(Provider())}
    )
    marked, release = threading.Event(), threading.Event()
    webhook_pid: list[int] = []
    errors: list[BaseException] = []

    def runner() -> None:
        # The call timed out: the step is unknown, the task waits an hour for its lookup.
        try:
            with transaction.atomic():
                step_mark_unknown(
                    lease=lease,
                    step=step,
                    outcome=Outcome.unknown("the call timed out"),
                    next_check_in=3600.0,
                )
                marked.set()
                release.wait(timeout=30)  # not committed yet
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    def webhook() -> None:
        # The provider's notification arrives in that very instant.
        try:
            marked.wait(timeout=30)
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                webhook_pid.append(cursor.fetchone()[0])
            step_settle(
                step_id=step.pk,
                outcome=Outcome.done({"id": "pi_race"}),
                via="webhook payment_intent.succeeded",
                actor="stripe",
            )
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=runner), threading.Thread(target=webhook)]
    for t in threads:
        t.start()
    assert marked.wait(timeout=30)
    end = time.monotonic() + 10
    while not webhook_pid and time.monotonic() < end:
        time.sleep(0.01)
    assert webhook_pid, "the webhook never connected"
    _waiting_on_a_lock(webhook_pid[0])  # its statement began before the runner's commit
    release.set()
    for t in threads:
        t.join(timeout=30)
    assert errors == []

    lease_release(lease)
    settled = Step.objects.get(pk=step.pk)
    task = Task.objects.get(pk=task.pk)
    assert settled.state == "done"
    # Woken at once: runnable, not waiting an hour for a lookup of a settled step.
    assert task.status == "runnable" and task.wake_at is None
    assert task_list_runnable().filter(pk=task.pk).exists()


def test_a_waiting_task_is_always_picked_up_at_its_wake_up_time(**_: Any) -> None:
    """Whatever settled or did not meanwhile, the sweeper's rule and the runner's agree:
    a waiting task whose time has come is runnable."""
    task = task_create(kind="renewal", goal="wake")
    lease = lease_acquire(task_id=task.pk, owner="runner")
    assert lease is not None
    step = step_record(
        lease=lease, decision=charge(invoice()), tools={"charge": ChargeTool(Provider())}
    )
    # Due in a second: the two reads just below take milliseconds, so the task is not due
    # yet when they run, on a busy machine too; it is due well within the ten seconds after.
    step_mark_unknown(lease=lease, step=step, outcome=Outcome.unknown("timeout"), next_check_in=1.0)
    lease_release(lease)
    assert Task.objects.get(pk=task.pk).status == "waiting"
    assert not task_list_runnable().filter(pk=task.pk).exists()
    end = time.monotonic() + 10
    while not task_list_runnable().filter(pk=task.pk).exists():
        assert time.monotonic() < end, "the waiting task never became runnable"
        time.sleep(0.05)
