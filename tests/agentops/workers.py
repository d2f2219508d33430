"""Real RQ worker and sweeper processes for the runner tests."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import django_rq
import pytest
from django.db import connections

from agentops.workers import WORKER_ARGS
from devtools.database import database_url
from devtools.process import Popen, end, spawn
from devtools.stack.control import stack_control
from journal.models import Task
from journal.status import ADVANCING
from tests.agentops.sandboxed import sandbox_settings
from tests.databases import flag
from tests.sandbox.fixtures import SandboxHandle


def restart_server(name: str) -> None:
    """Have the launcher, which started this run's servers, restart one: ``postgres`` (an
    immediate shutdown, as a crash) or ``redis`` (it comes back empty). The test says it
    needs that with ``@pytest.mark.stack(name)``, which fails it where the launcher did not."""
    answer = stack_control(f"restart {name}")
    assert answer is not None and answer["ok"] is True, answer
    if name == "postgres":
        connections.close_all()  # this process's connections died with it


def quiet_world() -> Any:
    """An empty Redis, and no task from earlier tests left runnable to be swept up.

    Earlier tests leave tasks running or waiting on purpose; they are parked the way an
    operator would (flagged, with the reason), not edited behind the journal's back.
    """
    redis = django_rq.get_connection("default")
    redis.flushdb()
    for task_id in Task.objects.filter(status__in=ADVANCING).values_list("pk", flat=True):
        flag(task_id, "parked", "parked by the test suite")
    return redis


@dataclass
class Fleet:
    """Workers and a sweeper, started and killed by the test."""

    env: dict[str, str]
    logs: Path
    procs: list[Popen] = field(default_factory=list)

    def _start(self, argv: list[str], **extra: str) -> Popen:
        log = self.logs / f"{argv[0]}-{len(self.procs)}.log"
        proc = spawn([sys.executable, "manage.py", *argv], env={**self.env, **extra}, output=log)
        self.procs.append(proc)
        return proc

    def worker(self, **extra: str) -> Popen:
        return self._start(list(WORKER_ARGS), **extra)

    def sweeper(self, **extra: str) -> Popen:
        return self._start(["sweep", "--interval", "0.3"], **extra)

    def stop(self) -> None:
        # Each whole group, even when its leader is dead: a worker killed by the test leaves
        # RQ's scheduler, its forked child, running in that group.
        end(*self.procs, timeout=30, signum=signal.SIGKILL)


@pytest.fixture
def fleet(
    committed: None,
    payments_sandbox: SandboxHandle,
    mail_sandbox: SandboxHandle,
    bookings_sandbox: SandboxHandle,
    clean_faults: None,
    tmp_path: Path,
) -> Iterator[Fleet]:
    redis = quiet_world()
    tools = sandbox_settings(payments_sandbox, mail_sandbox, bookings_sandbox)
    env = {
        **os.environ,
        **{name: str(value) for name, value in tools.items()},
        "DJANGO_SETTINGS_MODULE": "agentops.settings_test",
        # Workers and the sweeper connect as the worker role, as in production.
        "DATABASE_URL": database_url("worker"),
        "TOOL_TIMEOUT_SECONDS": "0.5",
        "RECONCILE_SCHEDULE": "0.2,0.3,0.5,0.5,1,1,2,2,2",
        "SWEEP_GRACE_SECONDS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    # Production workers: no development tools, no tool wrapper, no fault armed (a test arms
    # one worker with devtools.chaos.kill.armed).
    for name in ("AGENTOPS_DEVTOOLS", "AGENTOPS_TOOL_WRAPPERS", "AGENTOPS_CHAOS_KILL"):
        env.pop(name, None)
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # the browser tests' allowance stays with them
    # Workers run as the app's own role, like production: no owner credentials.
    env.pop("DATABASE_OWNER_URL", None)
    fleet = Fleet(env, logs=tmp_path)
    yield fleet
    fleet.stop()
    redis.flushdb()


def apply_decisions(task_id: Any) -> list[str]:
    """Apply every person's decision about the task that the web server recorded and no worker
    has applied yet, in this process, as the worker rung for it would (agentops.decisions);
    what each did."""
    from agentops.decisions import decision_apply
    from journal.models import Decision

    pending = Decision.objects.filter(task_id=task_id, applied_at__isnull=True).order_by("pk")
    return [decision_apply(decision_id=d) for d in pending.values_list("pk", flat=True)]
