"""What the processes of a run hold and spend: resident memory and CPU time, by role.

The roles are the benchmark's own process, the RQ workers, the sandbox providers, Redis and
PostgreSQL. PostgreSQL is many processes sharing its buffers, so its memory is the sum of
what each holds alone (USS: counting the shared buffers once per backend would count them
many times); the others are one process each, and their figure is its RSS.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psutil
from django.db import connections


@dataclass
class Roles:
    """The processes of a run, by role (a role may have several: two workers)."""

    pids: dict[str, list[int]] = field(default_factory=dict)

    def add(self, role: str, pids: Iterable[int]) -> None:
        self.pids.setdefault(role, []).extend(pids)

    def memory_mb(self) -> dict[str, float]:
        """Each role's memory (MB): RSS per process, or USS summed over PostgreSQL's."""
        out: dict[str, float] = {}
        for role, pids in self.pids.items():
            for i, pid in enumerate(pids):
                name = role if len(pids) == 1 else f"{role}_{i + 1}"
                out[name] = round(_memory(pid, unique=role == "postgres") / 2**20, 1)
        if "postgres" in self.pids:
            # Its backends come and go: the server is the postmaster and its children now.
            out = {k: v for k, v in out.items() if not k.startswith("postgres")}
            out["postgres"] = round(_postgres_uss(self.pids["postgres"][0]) / 2**20, 1)
        return out

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time (user and system) each role has used so far, its processes summed
        (PostgreSQL's backends included, while they live)."""
        out: dict[str, float] = {}
        for role, pids in self.pids.items():
            total = 0.0
            for pid in pids:
                total += _cpu(pid)
                if role == "postgres":
                    # Its backends come and go: the living ones, and what those that ended
                    # spent (the postmaster reaps them: its children's times).
                    with _gone_ok():
                        postmaster = psutil.Process(pid)
                        total += sum(_cpu(c.pid) for c in postmaster.children())
                        ended = postmaster.cpu_times()
                        total += float(ended.children_user + ended.children_system)
            out[role] = total
        return out


def _memory(pid: int, *, unique: bool) -> float:
    with _gone_ok():
        process = psutil.Process(pid)
        return float(process.memory_full_info().uss if unique else process.memory_info().rss)
    return 0.0


def _postgres_uss(postmaster: int) -> float:
    total = _memory(postmaster, unique=True)
    with _gone_ok():
        for child in psutil.Process(postmaster).children():
            total += _memory(child.pid, unique=True)
    return total


def _cpu(pid: int) -> float:
    with _gone_ok():
        times = psutil.Process(pid).cpu_times()
        return float(times.user + times.system)
    return 0.0


def _gone_ok() -> contextlib.suppress:
    """Ignore a process that ended meanwhile (a backend that closed)."""
    return contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied)


def postmaster_pid() -> int:
    """The PostgreSQL server's main process: the parent of this connection's backend."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = int(cursor.fetchone()[0])
    return int(psutil.Process(backend).ppid())


def redis_pid(connection: Any) -> int:
    return int(connection.info("server")["process_id"])


def deltas(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    return {k: round(after[k] - before.get(k, 0.0), 3) for k in after}
