"""The peer a user would otherwise pick: DBOS Transact, running workflows of the same number
of no-op steps against the same PostgreSQL (its system database in its own schema).

DBOS is an optional extra (``pip install -e '.[bench]'``); without it this part says so.
"""

from __future__ import annotations

import time
from typing import Any


def dbos_available() -> bool:
    try:
        import dbos  # noqa: F401
    except ImportError:
        return False
    return True


def dbos_steps_per_s(*, url: str, steps: int, per_task: int = 20) -> float:
    """Steps per second of sequential DBOS workflows of ``per_task`` no-op steps."""
    from dbos import DBOS

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
        began = time.perf_counter()
        for _ in range(tasks):
            workflow(per_task)
        return tasks * per_task / (time.perf_counter() - began)
    finally:
        DBOS.destroy()


def postgres_url(settings_dict: dict[str, Any]) -> str:
    s = settings_dict
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    return f"postgresql://{s['USER']}{password}@{s['HOST']}:{s['PORT']}/{s['NAME']}"
