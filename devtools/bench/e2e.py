"""Renewals end to end: RQ worker processes, the sandbox providers with no faults, and the
journal — from ``task_start`` to every task finished, with one effect per step key."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rq import Worker

from agentops.chaos.world import SANDBOX_ENVIRONMENT
from agentops.runner import run_queue, task_start
from agentops.workers import WORKER_ARGS
from journal.models import Step, Task
from journal.status import FINAL
from sandbox.client import SandboxClient

REPO = Path(__file__).resolve().parents[2]
WORKER = ["manage.py", *WORKER_ARGS]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _start(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(  # noqa: S603 - our own interpreter and modules
        [sys.executable, *argv],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)  # RQ's forked scheduler goes with it


def _wait_http(url: str, deadline: float = 15.0) -> None:
    end = time.monotonic() + deadline
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).close()  # noqa: S310 - our own loopback
            return
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.05)


def _wait_workers(queue: Any, count: int, deadline: float = 30.0) -> None:
    end = time.monotonic() + deadline
    while Worker.count(connection=queue.connection, queue=queue) < count:
        if time.monotonic() > end:
            raise RuntimeError(f"fewer than {count} workers registered within {deadline:.0f} s")
        time.sleep(0.05)


@contextlib.contextmanager
def sandboxes() -> Iterator[dict[str, str]]:
    """The payments and mail sandboxes, as the settings that point the tools at them."""
    # A sandbox stands for a third party: it gets none of our credentials (as in the chaos run).
    env = {k: v for k, v in os.environ.items() if k in SANDBOX_ENVIRONMENT}
    env["PYTHONUNBUFFERED"] = "1"
    procs = []
    found = {}
    try:
        for name, var in (("payments", "STRIPE_API_BASE"), ("mail", "MAIL_API_BASE")):
            port = _free_port()
            procs.append(_start(["-m", f"sandbox.{name}", "--port", str(port)], env))
            found[var] = f"http://127.0.0.1:{port}"
            _wait_http(f"{found[var]}/_sandbox/health")
        yield found
    finally:
        _stop(procs)


def e2e_tasks_per_s(*, workers: int, tasks: int, providers: dict[str, str]) -> float:
    """Renewal tasks per second on ``workers`` worker processes; checks the ledgers."""
    env = {
        **os.environ,
        **providers,
        "STRIPE_API_KEY": "sk_test_bench",
        "STRIPE_SEARCH_LAG_SECONDS": "0",
        "LOG_LEVEL": "WARNING",
    }
    queue = run_queue()
    registered = Worker.count(connection=queue.connection, queue=queue)
    procs = [_start(WORKER, env) for _ in range(workers)]
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
        _stop(procs)
    payments = SandboxClient(providers["STRIPE_API_BASE"])
    mail = SandboxClient(providers["MAIL_API_BASE"])
    for step in Step.objects.filter(task__in=ids, kind="call"):
        ledger = payments if step.tool == "charge_customer" else mail
        if len(ledger.ledger(key=step.key)) != 1:
            raise RuntimeError(f"{step.key}: not exactly one effect")
    return tasks / elapsed
