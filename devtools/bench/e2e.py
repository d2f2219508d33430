"""Renewals end to end: RQ worker processes, the sandbox providers with no faults, and the
journal — from ``task_start`` to every task finished, with one effect per step key."""

from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

from rq import Worker

from agentops.runner import run_queue, task_start
from agentops.workers import WORKER_ARGS
from devtools.process import end, spawn
from devtools.sandboxes import sandbox_spawn, sandboxes_ready, sandboxes_stop
from journal.models import Step, Task
from journal.status import FINAL
from sandbox.client import SandboxClient

WORKER = [sys.executable, "manage.py", *WORKER_ARGS]


def _wait_workers(queue: Any, count: int, deadline: float = 30.0) -> None:
    give_up = time.monotonic() + deadline
    while Worker.count(connection=queue.connection, queue=queue) < count:
        if time.monotonic() > give_up:
            raise RuntimeError(f"fewer than {count} workers registered within {deadline:.0f} s")
        time.sleep(0.05)


@contextlib.contextmanager
def sandboxes() -> Iterator[dict[str, str]]:
    """The payments and mail sandboxes, as the settings that point the tools at them."""
    handles = [sandbox_spawn("payments"), sandbox_spawn("mail")]
    try:
        sandboxes_ready(*handles)
        yield {"STRIPE_API_BASE": handles[0].url, "MAIL_API_BASE": handles[1].url}
    finally:
        sandboxes_stop(*handles)


def e2e_tasks_per_s(*, workers: int, tasks: int, providers: dict[str, str]) -> float:
    """Renewal tasks per second on ``workers`` worker processes; checks the ledgers."""
    env = {
        **os.environ,
        **providers,
        "STRIPE_API_KEY": "sk_test_bench",
        "STRIPE_SEARCH_LAG_SECONDS": "0",
        "LOG_LEVEL": "WARNING",
    }
    env.pop("AGENTOPS_DEVTOOLS", None)  # workers as in production
    queue = run_queue()
    registered = Worker.count(connection=queue.connection, queue=queue)
    procs = [spawn(WORKER, env=env) for _ in range(workers)]
    try:
        _wait_workers(queue, registered + workers)  # before the clock starts
        batch = uuid.uuid4().hex[:8]
        began = time.perf_counter()
        ids = [
            task_start(
                kind="renewal",
                goal=f"bench: renew {i}",
                refs={"invoice": f"B-{batch}-{i}", "amount": 4900, "email": "b@e.ch"},
            ).pk
            for i in range(tasks)
        ]
        while Task.objects.filter(pk__in=ids).exclude(status__in=FINAL).exists():
            if time.perf_counter() - began > 600:
                raise RuntimeError("the batch did not finish within 10 minutes")
            time.sleep(0.02)
        elapsed = time.perf_counter() - began
    finally:
        end(*procs, timeout=20)  # RQ's forked scheduler goes with each
    payments = SandboxClient(providers["STRIPE_API_BASE"])
    mail = SandboxClient(providers["MAIL_API_BASE"])
    for step in Step.objects.filter(task__in=ids, kind="call"):
        ledger = payments if step.tool == "charge_customer" else mail
        if len(ledger.ledger(key=step.key)) != 1:
            raise RuntimeError(f"{step.key}: not exactly one effect")
    return tasks / elapsed
