"""Benchmark: a batch of subscription renewals, end to end, on real workers.

Run with ``make bench`` (durable throwaway PostgreSQL and Redis around it). For each worker
count (1 = the baseline, then 2) it starts that many RQ worker processes, records N renewal
tasks (charge the invoice, email the receipt) against the sandbox providers with no faults,
and waits until every task has finished. It prints elapsed time, tasks and steps per second,
and the speed-up over the baseline measured in the same run, and checks the ledgers: one
charge and one email per task, or it fails.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_http(url: str, deadline: float = 15.0) -> None:
    end = time.monotonic() + deadline
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).close()  # noqa: S310 - our own loopback
            return
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.05)


def start(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        # Anything left in its group (RQ's forked scheduler) goes with it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    options = parser.parse_args()

    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentops.settings",
        "DJANGO_DEBUG": "1",
        "STRIPE_API_KEY": "sk_test_bench",
        "STRIPE_SEARCH_LAG_SECONDS": "0",
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    subprocess.run([PY, "manage.py", "migrate", "-v0"], cwd=REPO, env=env, check=True)
    providers = []
    for name, var in (("payments", "STRIPE_API_BASE"), ("mail", "MAIL_API_BASE")):
        port = free_port()
        providers.append(start([PY, "-m", f"sandbox.{name}", "--port", str(port)], env))
        env[var] = f"http://127.0.0.1:{port}"
        wait_http(f"{env[var]}/_sandbox/health")
    os.environ.update(env)

    import django

    django.setup()
    from agentops.runner import task_start
    from journal.models import Step, Task
    from journal.status import FINAL
    from sandbox.client import SandboxClient

    worker_argv = [
        PY,
        "manage.py",
        "rqworker",
        "default",
        "--with-scheduler",
        "--serializer",
        "rq.serializers.JSONSerializer",
    ]
    results: dict[int, float] = {}
    try:
        for count in options.workers:
            workers = [start(worker_argv, env) for _ in range(count)]
            time.sleep(1.0)  # let the workers register before the clock starts
            batch = uuid.uuid4().hex[:8]
            began = time.perf_counter()
            tasks = [
                task_start(
                    kind="renewal",
                    goal=f"renew {i}",
                    refs={"invoice": f"INV-{batch}-{i}", "amount": 4900, "email": "b@e.ch"},
                ).pk
                for i in range(options.tasks)
            ]
            while Task.objects.filter(pk__in=tasks).exclude(status__in=FINAL).exists():
                if time.perf_counter() - began > 600:
                    raise SystemExit("the batch did not finish within 10 minutes")
                time.sleep(0.05)
            elapsed = time.perf_counter() - began
            stop(workers)
            results[count] = elapsed
            steps = Step.objects.filter(task__in=tasks, kind="call")
            payments = SandboxClient(env["STRIPE_API_BASE"])
            mail = SandboxClient(env["MAIL_API_BASE"])
            for step in steps:
                ledger = payments if step.tool == "charge_customer" else mail
                if len(ledger.ledger(key=step.key)) != 1:
                    raise SystemExit(f"{step.key}: not exactly one effect")
            n = steps.count()
            print(
                f"{count} worker(s): {options.tasks} renewals ({n} effect steps) in "
                f"{elapsed:.2f} s = {options.tasks / elapsed:.1f} tasks/s, "
                f"{n / elapsed:.1f} steps/s; one effect per step key: yes"
            )
        base = results[options.workers[0]]
        for count, elapsed in results.items():
            print(f"speed-up of {count} worker(s) over {options.workers[0]}: {base / elapsed:.2f}x")
    finally:
        stop(providers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
