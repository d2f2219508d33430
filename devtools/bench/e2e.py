"""Renewals end to end: RQ worker processes, the sandbox providers with no faults, and the
journal — from ``task_start`` to every task finished, with one effect per step key.

The workers are started as production starts them (``manage.py rqworker`` with agentops'
worker class, no development tool loaded, logging as the product does by default: a JSON
line a step at INFO, to a file as a supervisor would take it); what every process spent on a
batch (CPU) and holds after it (memory) is read from the operating system
(devtools.bench.procs).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rq import Worker

from agentops.doorbell import run_queue
from agentops.effects import task_start
from agentops.workers import WORKER_ARGS
from devtools.bench.procs import Roles, deltas, postmaster_pid, redis_pid
from devtools.process import Popen, end, spawn
from devtools.sandboxes import SandboxHandle, sandbox_spawn, sandboxes_ready, sandboxes_stop
from journal.models import Step, Task
from journal.status import FINAL
from sandbox.client import SandboxClient

WORKER = [sys.executable, "manage.py", *WORKER_ARGS]
BATCH_DEADLINE_SECONDS = 900.0


def _wait_workers(queue: Any, count: int, deadline: float = 30.0) -> None:
    give_up = time.monotonic() + deadline
    while Worker.count(connection=queue.connection, queue=queue) < count:
        if time.monotonic() > give_up:
            raise RuntimeError(f"fewer than {count} workers registered within {deadline:.0f} s")
        time.sleep(0.05)


@dataclass
class World:
    """The providers and the workers of an end-to-end run, and every process's role."""

    providers: dict[str, str]
    handles: list[SandboxHandle]
    roles: Roles = field(default_factory=Roles)


@contextlib.contextmanager
def sandboxes(*args: str) -> Iterator[World]:
    """The payments and mail sandboxes (``args`` given to each), as the settings that point
    the tools at them."""
    handles = [sandbox_spawn("payments", *args), sandbox_spawn("mail", *args)]
    try:
        sandboxes_ready(*handles)
        world = World(
            providers={"STRIPE_API_BASE": handles[0].url, "MAIL_API_BASE": handles[1].url},
            handles=handles,
        )
        world.roles.add("bench", [os.getpid()])
        world.roles.add("payments", [handles[0].process.pid])
        world.roles.add("mail", [handles[1].process.pid])
        world.roles.add("postgres", [postmaster_pid()])
        world.roles.add("redis", [redis_pid(run_queue().connection)])
        yield world
    finally:
        sandboxes_stop(*handles)


# What the benchmark's workers are not given from its own environment: they run as production
# runs them, at the product's defaults (LOG_LEVEL INFO, LOG_FORMAT json).
NOT_PASSED_TO_WORKERS = ("AGENTOPS_DEVTOOLS", "LOG_LEVEL", "LOG_FORMAT")


def worker_env(world: World) -> dict[str, str]:
    """A benchmark worker's environment: this process's, pointed at the world's providers."""
    env = {
        **os.environ,
        **world.providers,
        "STRIPE_API_KEY": "sk_test_bench",
        "STRIPE_SEARCH_LAG_SECONDS": "0",
    }
    for name in NOT_PASSED_TO_WORKERS:
        env.pop(name, None)
    return env


@contextlib.contextmanager
def workers(world: World, count: int) -> Iterator[list[Popen]]:
    """``count`` RQ worker processes, registered before this yields. They log what production
    workers log by default (a line a step, and one a job), each to a file, as a supervisor
    would take it: what a line costs is a step's cost too (runs before this one logged only
    warnings, to nowhere). The files are removed when the block ends well, and kept when it
    raises (its exception names where)."""
    env = worker_env(world)
    queue = run_queue()
    registered = Worker.count(connection=queue.connection, queue=queue)
    logs = Path(tempfile.mkdtemp(prefix="agentops-bench-workers-"))
    procs = [spawn(WORKER, env=env, output=logs / f"worker-{i}.log") for i in range(count)]
    roles = world.roles.pids
    kept = False
    try:
        _wait_workers(queue, registered + count)
        roles["worker"] = [p.pid for p in procs]
        yield procs
    except BaseException as failed:
        kept = True
        failed.add_note(f"the benchmark's workers' logs are kept in {logs}")
        raise
    finally:
        roles.pop("worker", None)
        end(*procs, timeout=20)  # RQ's forked scheduler goes with each
        if not kept:
            shutil.rmtree(logs, ignore_errors=True)


@dataclass(frozen=True)
class Batch:
    tasks: int
    seconds: float
    task_ids: list[Any]
    cpu_ms_per_task: dict[str, float]
    latency_ms: list[float]

    @property
    def tasks_per_s(self) -> float:
        return self.tasks / self.seconds


def batch_run(world: World, *, tasks: int, tag: str = "") -> Batch:
    """``tasks`` renewals started one after another by this process, as a program would,
    and waited for until every one is over; the ledgers checked for one effect per key."""
    batch = tag or uuid.uuid4().hex[:8]
    cpu_before = world.roles.cpu_seconds()
    began = time.perf_counter()
    ids = [
        task_start(
            kind="renewal",
            goal=f"bench: renew {i}",
            refs={"invoice": f"B-{batch}-{i}", "amount": 4900, "email": "b@e.ch"},
        ).pk
        for i in range(tasks)
    ]
    waiting_for(ids, began)
    elapsed = time.perf_counter() - began
    spent = deltas(world.roles.cpu_seconds(), cpu_before)
    ledgers_check(world, ids)
    return Batch(
        tasks=tasks,
        seconds=elapsed,
        task_ids=ids,
        cpu_ms_per_task={role: round(1000 * s / tasks, 2) for role, s in spent.items()},
        latency_ms=task_latencies_ms(ids),
    )


# How many of the oldest unfinished tasks each look asks about.
LOOK_AT = 50


def waiting_for(ids: list[Any], began: float) -> None:
    """Until every task in ``ids`` is over. The asking costs the database and this process CPU,
    and is not the work: each look asks about the oldest few still unfinished (the queue runs
    them roughly in order), and waits a twentieth of a second only while one of those is. A
    look at all of 600 cost 4.4 ms of this process's CPU and 2.5 ms of PostgreSQL's, ten
    times a second: about 0.7 ms a task added to the figures."""
    pending = list(ids)
    while pending:
        if time.perf_counter() - began > BATCH_DEADLINE_SECONDS:
            raise RuntimeError(f"the batch did not finish within {BATCH_DEADLINE_SECONDS:.0f} s")
        head, pending = pending[:LOOK_AT], pending[LOOK_AT:]
        unfinished = set(
            Task.objects.filter(pk__in=head).exclude(status__in=FINAL).values_list("pk", flat=True)
        )
        pending = [i for i in head if i in unfinished] + pending
        if unfinished:
            time.sleep(0.05)


def ledgers_check(world: World, ids: list[Any]) -> None:
    payments = SandboxClient(world.providers["STRIPE_API_BASE"])
    mail = SandboxClient(world.providers["MAIL_API_BASE"])
    keys: dict[str, set[str]] = {"charge_customer": set(), "send_email": set()}
    for step in Step.objects.filter(task__in=ids, kind="call").only("tool", "key"):
        keys.setdefault(step.tool, set()).add(step.key)
    for client, tool in ((payments, "charge_customer"), (mail, "send_email")):
        counted: dict[str, int] = {}
        for entry in client.ledger():
            if entry.get("key") in keys[tool]:
                counted[entry["key"]] = counted.get(entry["key"], 0) + 1
        wrong = {k for k in keys[tool] if counted.get(k) != 1}
        if wrong:
            raise RuntimeError(f"{len(wrong)} {tool} keys have not exactly one effect")


def task_latencies_ms(ids: list[Any]) -> list[float]:
    """From each task's creation to its finish, as the journal dated them (ms)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM s.created_at - t.created_at) * 1000 "
            "FROM journal_task t JOIN journal_step s ON s.task_id = t.id AND s.kind = 'finish' "
            "WHERE t.id = ANY(%s)",
            [list(ids)],
        )
        return [float(row[0]) for row in cursor.fetchall()]
