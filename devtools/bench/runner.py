"""The journal's runner path, measured: record → a no-op tool → settle, under a lease.

A scripted planner decides ``per_task`` calls of a tool that does nothing, then finishes;
``journal.run.task_advance`` runs each task exactly as a worker would (without RQ around
it). This is the cost of the safety alone: two durable commits per step and whatever the
harness adds around them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from journal.outcomes import Observation, Outcome, Reply
from journal.policy import Policy
from journal.protocols import Call, CostClass, Decision, Finish, TaskFacts
from journal.record import task_create
from journal.run import task_advance

GOAL = "bench: no-op steps"


class NoopTool:
    """A full-effect tool whose call does nothing and always succeeds."""

    name = "noop"
    cost = CostClass.FULL
    key_lifetime = timedelta(hours=24)
    lookup_lag = timedelta(0)
    compensation: str | None = None
    irreversible = False
    evidence = ("id",)

    def validate(self, args: Mapping[str, Any]) -> list[str]:
        return []

    def guard(self, args: Mapping[str, Any]) -> str | None:
        return None

    def once(self, args: Mapping[str, Any]) -> bool:
        return False

    def call(self, args: Mapping[str, Any], *, key: str) -> Observation:
        return Reply(200, evidence={"id": key})

    def lookup(self, args: Mapping[str, Any], *, key: str) -> Outcome | None:
        return None

    def undo_args(self, args: Mapping[str, Any], evidence: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def standing(self, args: Mapping[str, Any], evidence: Mapping[str, Any]) -> bool | None:
        return None


@dataclass
class Countdown:
    """Decides ``steps`` no-op calls, then finishes; notes when each decision is asked."""

    steps: int
    max_duration: timedelta = timedelta(0)
    marks: list[int] = field(default_factory=list)
    queries: Any = None

    def decide(self, facts: TaskFacts) -> Decision:
        if self.queries is not None:
            self.marks.append(len(self.queries.captured_queries))
        n = len(facts.steps)
        return Call("noop", {"i": n}) if n < self.steps else Finish("done")


TOOLS = {"noop": NoopTool()}
POLICY = Policy(max_steps=100_000)


def rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/statm") as statm:
        pages = int(statm.read().split()[1])
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def run_tasks(*, tasks: int, per_task: int) -> float:
    """Seconds to run ``tasks`` tasks of ``per_task`` no-op steps each, one after another."""
    ids = [task_create(kind="bench", goal=GOAL).pk for _ in range(tasks)]
    began = time.perf_counter()
    for task_id in ids:
        result = task_advance(
            task_id=task_id, planner=Countdown(per_task), tools=TOOLS, policy=POLICY
        )
        if result.stopped != "finished":
            raise RuntimeError(f"a bench task stopped {result.stopped}")
    return time.perf_counter() - began


def journal_steps_per_s(*, steps: int, per_task: int = 20) -> float:
    tasks = max(1, steps // per_task)
    return tasks * per_task / run_tasks(tasks=tasks, per_task=per_task)


@dataclass(frozen=True)
class StepCost:
    statements: list[int]
    """Statements the runner sent for each step, in order (between two decisions)."""
    wal_bytes_per_step: float


def step_cost(*, steps: int = 200) -> StepCost:
    """What each step of one long task costs the database, counted, not timed."""
    task = task_create(kind="bench", goal=GOAL)
    wal_before = _wal_lsn()
    with CaptureQueriesContext(connection) as queries:
        planner = Countdown(steps, queries=queries)
        task_advance(task_id=task.pk, planner=planner, tools=TOOLS, policy=POLICY)
    wal = _wal_bytes_since(wal_before)
    per_step = [b - a for a, b in zip(planner.marks, planner.marks[1:], strict=False)]
    return StepCost(statements=per_step, wal_bytes_per_step=round(wal / steps, 1))


def _wal_lsn() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_wal_lsn()::text")
        return str(cursor.fetchone()[0])


def _wal_bytes_since(lsn: str) -> float:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)", [lsn])
        return float(cursor.fetchone()[0])


def memory_over(*, steps: int = 10_000, per_task: int = 50) -> tuple[float, float]:
    """A worker's resident memory before and after ``steps`` steps (MB)."""
    run_tasks(tasks=2, per_task=per_task)  # warm: imports, caches, the first connection
    start = rss_mb()
    run_tasks(tasks=max(1, steps // per_task), per_task=per_task)
    return start, rss_mb()
