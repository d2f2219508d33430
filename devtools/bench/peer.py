"""The peer a user would otherwise pick: DBOS Transact, running workflows of the same number
of no-op steps against the same PostgreSQL (its system database in its own schema).

Two shapes, as DBOS recommends running them: **sequential** (one workflow after another,
each step checkpointed before the next starts: the same promise as one agentops task) and
**concurrent** (every workflow started at once with ``DBOS.start_workflow``, run by its
executor's threads, then awaited).

Each measurement runs in a process of its own (``python -m devtools.bench.peer``: DBOS keeps
global state, and its start-up is not what is measured), with the database's address in
``BENCH_DBOS_URL`` (never on a command line); it prints one JSON line: its rate, and the CPU
a step cost while it ran, its own process's (all its threads) and, given the server's main
process in ``BENCH_POSTMASTER_PID``, PostgreSQL's (all its processes), read as the benchmark
reads the production path's. DBOS is an optional extra (``pip install -e '.[bench]'``);
without it :func:`dbos_available` says so.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

URL_VARIABLE = "BENCH_DBOS_URL"
POSTMASTER_VARIABLE = "BENCH_POSTMASTER_PID"
MODES = ("sequential", "concurrent")


def dbos_available() -> bool:
    try:
        import dbos  # noqa: F401
    except ImportError:
        return False
    return True


def dbos_steps_per_s(
    *, url: str, steps: int, per_task: int = 20, mode: str, postmaster: int | None = None
) -> dict[str, Any]:
    """Steps per second of DBOS workflows of ``per_task`` no-op steps, ``mode`` as above, and
    the CPU a step cost (µs): this process's (``runner``) and, given its main process,
    PostgreSQL's (``postgres``)."""
    from dbos import DBOS

    from devtools.bench.procs import Roles

    roles = Roles()
    roles.add("runner", [os.getpid()])
    if postmaster is not None:
        roles.add("postgres", [postmaster])

    DBOS(config={"name": "agentops-bench", "system_database_url": url, "log_level": "WARNING"})

    @DBOS.step()
    def noop(i: int) -> int:
        return i

    @DBOS.workflow()
    def workflow(n: int) -> int:
        for i in range(n):
            noop(i)
        return n

    DBOS.launch()
    try:
        workflow(per_task)  # warm: DBOS's first workflow also creates what it needs
        tasks = max(1, steps // per_task)
        cpu = roles.cpu_seconds()
        began = time.perf_counter()
        if mode == "sequential":
            for _ in range(tasks):
                workflow(per_task)
        else:
            handles = [DBOS.start_workflow(workflow, per_task) for _ in range(tasks)]
            for handle in handles:
                handle.get_result()
        seconds = time.perf_counter() - began
        spent = roles.cpu_seconds()
        measured = tasks * per_task
        return {
            "steps_per_s": measured / seconds,
            "cpu_us_per_step": {
                role: round((spent[role] - cpu[role]) * 1e6 / measured, 1) for role in spent
            },
        }
    finally:
        DBOS.destroy()


def postgres_url(settings_dict: dict[str, Any]) -> str:
    s = settings_dict
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    return f"postgresql://{s['USER']}{password}@{s['HOST']}:{s['PORT']}/{s['NAME']}"


if __name__ == "__main__":
    mode, count = sys.argv[1], int(sys.argv[2])
    if mode not in MODES:
        raise SystemExit(f"mode: one of {', '.join(MODES)}")
    postmaster = os.environ.get(POSTMASTER_VARIABLE)
    print(
        json.dumps(
            dbos_steps_per_s(
                url=os.environ[URL_VARIABLE],
                steps=count,
                mode=mode,
                postmaster=int(postmaster) if postmaster else None,
            )
        )
    )
