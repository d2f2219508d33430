"""One runner per task (docs/design.md §11): a lease in PostgreSQL, judged by its clock.

Taking the lease increments the task's token. Every journal write made under a lease
starts with the fence (``journal_fence``, journal/sql; :func:`fence` from Python), which
checks the token and extends the lease in one statement,
and holds the task's row lock until the write commits — so a runner whose lease was taken
over can write nothing, and a takeover cannot slip between a holder's check and commit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import connection

from journal.db import prepared_cursor


class LeaseLost(Exception):
    """Another runner holds the task now; this runner must stop without writing."""

    @classmethod
    def of(cls, lease: Lease) -> LeaseLost:
        return cls(f"task {lease.task_id}: lease {lease.token} of {lease.owner} was taken over")


@dataclass
class Lease:
    task_id: UUID
    owner: str
    token: int
    failed_runs: int = 0
    """Runs of the task taken up before this one since the last that ended cleanly."""
    versions: list[int] = field(default_factory=list, compare=False)
    """The task's version after each of this holder's writes, in order: a gap means a write
    that was not the holder's (a webhook, a person) came in between."""
    released: bool = field(default=False, compare=False)
    """Given back already, with the write that ended the run (a task finished, waiting...)."""
    task: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    """The task's row as taking the lease found it (and ``db_now``): read with the lease."""
    deferred: Deferred | None = field(default=None, compare=False, repr=False)
    """A settlement the holder has not written yet: it goes with the next step's record, in
    one commit (journal.run), or before any other write or read of the holder's."""


@dataclass
class Deferred:
    """A step's settlement held back by its runner until its next write (docs/design.md §4,
    "One commit per step"). ``params`` are journal_settle's; ``write`` writes it alone."""

    step_id: int
    params: dict[str, Any]
    write: Callable[[], object]


def deferred_write(lease: Lease, *, seconds: float | None = None) -> None:
    """Write the settlement ``lease``'s holder held back, if any, before anything else the
    holder writes or reads: every write under a lease starts here (the fence, the lease's
    release, a status change, a record, a finish) and so does the runner's read of its task.
    ``seconds`` stretches the lease in the same statement (a slow planner's budget)."""
    held, lease.deferred = lease.deferred, None
    if held is None:
        return
    if seconds is not None:
        held.params["lease"] = seconds
    held.write()


@dataclass(frozen=True)
class Fenced:
    """What the fence saw of the task, under its row lock."""

    step_count: int
    status: str
    version: int


def lease_seconds() -> float:
    return float(settings.JOURNAL_LEASE_SECONDS)


def lease_acquire(*, task_id: UUID, owner: str, seconds: float | None = None) -> Lease | None:
    """Take the task's lease if nobody holds a live one; ``None`` if somebody does.

    Counts the run as failed until :func:`lease_release` says it ended cleanly: a runner that
    dies (SIGKILL, a lost database) leaves the count up, and the next runner sees it.
    """
    # Prepared once a session (journal/db.py), as the journal's own statements are: planning
    # it on the partitioned table costs more than running it (docs/design.md §17).
    with prepared_cursor() as cursor:
        cursor.execute(
            """
            UPDATE journal_task
               SET lease_token = lease_token + 1,
                   lease_owner = %s,
                   lease_expires_at = now() + make_interval(secs => %s),
                   lease_taken_at = now(),
                   failed_runs = failed_runs + 1
             WHERE id = %s AND (lease_expires_at IS NULL OR lease_expires_at <= now())
         RETURNING journal_task.*, now() AS db_now
            """,
            [owner, seconds if seconds is not None else lease_seconds(), task_id],
        )
        row = cursor.fetchone()
        columns = [c.name for c in cursor.description] if row is not None else []
    if row is None:
        return None
    task = dict(zip(columns, row, strict=True))
    return Lease(
        task_id=task_id,
        owner=owner,
        token=task["lease_token"],
        failed_runs=task["failed_runs"] - 1,
        task=task,
    )


def fence(lease: Lease, *, seconds: float | None = None) -> Fenced:
    """Inside a write transaction: prove the lease is still ours and extend it
    (``journal_fence``, the one lease check, which the journal's SQL functions call too).

    Returns the task's step count and status. Raises :class:`LeaseLost` if the token has
    moved on. ``seconds`` stretches the lease further than usual (a slow planner).
    """
    deferred_write(lease)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT * FROM journal_fence(p_task => %s::uuid, p_token => %s::bigint, "
            "p_lease => %s::float8)",
            [lease.task_id, lease.token, seconds if seconds is not None else lease_seconds()],
        )
        row = cursor.fetchone()
    if row is None:
        raise LeaseLost.of(lease)
    lease.versions.append(int(row[2]))
    return Fenced(step_count=int(row[0]), status=str(row[1]), version=int(row[2]))


def lease_release(lease: Lease, *, clean: bool = True) -> None:
    """Give the lease up early (a crashed runner's lease simply expires). ``clean`` says the
    run ended as it should (finished, waiting, handed to a human): the failure count resets."""
    deferred_write(lease)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE journal_task
               SET lease_expires_at = NULL, lease_owner = '',
                   failed_runs = CASE WHEN %s THEN 0 ELSE failed_runs END
             WHERE id = %s AND lease_token = %s
            """,
            [clean, lease.task_id, lease.token],
        )
