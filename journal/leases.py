"""One runner per task (docs/design.md §11): a lease in PostgreSQL, judged by its clock.

Taking the lease (``journal_lease_take``) increments the task's token. Every move made under
a lease is a journal function that starts with the lease check (``journal_hold``, journal/sql):
it checks the token, extends the lease and holds the task's row lock until the move commits,
so a runner whose lease was taken over can write nothing, and a takeover cannot slip between
a holder's check and its commit. :func:`lease_call` makes such a move from Python: the lease
and the settlement the holder held back (below) go with every one of them.

**The settlement held back** (docs/design.md §4, "One commit per step"): the runner settles
the step it just attempted with the next move it makes, in one statement, rather than on its
own. :func:`hold_back` keeps it on the lease; whichever lease move comes next carries it
(``p_settles``) and writes it first, so it is durable before anything else the holder writes,
and the runner's read of its task writes it before reading (:func:`settle_held`). Nobody has
to remember to write it first: it is part of every lease move's call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder

from journal.calls import call
from journal.events import StepEvent, held_event


class LeaseLost(Exception):
    """Another runner holds the task now; this runner must stop without writing."""

    @classmethod
    def of(cls, lease: Lease) -> LeaseLost:
        return cls(f"task {lease.task_id}: lease {lease.token} of {lease.owner} was taken over")


class TaskMoved(Exception):
    """The lease is still ours, but someone else changed the task (a person, a conflicting
    report): nothing was recorded; read the task again before deciding anything."""


@dataclass
class Lease:
    task_id: UUID
    owner: str
    token: int
    failed_runs: int = 0
    """Runs of the task taken up before this one since the last that ended cleanly."""
    version: int = 0
    """The task's version after the holder's last write (or read)."""
    interrupted: bool = field(default=False, compare=False)
    """Someone else (a provider's notification, a person) wrote to the task since the holder
    last read it: a write of the holder's found the version moved on."""
    released: bool = field(default=False, compare=False)
    """Given back already, with the write that ended the run (a task finished, waiting...)."""
    task: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    """The task's row as taking the lease found it (and ``db_now``): read with the lease."""
    held: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    """A settlement the holder has not written yet (journal_hold's p_settles): it goes with
    the holder's next move, in the same statement."""
    held_as: StepEvent | None = field(default=None, compare=False, repr=False)
    """What the settlement held back is, told once a move has written it."""
    events: list[StepEvent] = field(default_factory=list, compare=False, repr=False)
    """What the holder's moves did to steps, as they returned it (journal/events.py)."""

    def wrote(self, version_was: Any, version: Any) -> None:
        """A move of the holder's left the task at ``version``; before it, the task was at
        ``version_was``: if that is not the holder's last, someone else wrote in between."""
        if version_was is not None and int(version_was) != self.version:
            self.interrupted = True
        if version is not None:
            self.version = int(version)

    def read(self, version: int) -> None:
        """The holder read the task, at ``version``: what it knows is current."""
        self.version, self.interrupted = version, False


def lease_seconds() -> float:
    return float(settings.JOURNAL_LEASE_SECONDS)


def hold_back(
    lease: Lease,
    *,
    step_id: int,
    state: str,
    detail: str,
    outcome: Any,
    entry: Any,
    event: StepEvent,
) -> None:
    """Keep the settlement of ``step_id`` (the attempt just made) on ``lease``, for the
    holder's next move to write first (journal_hold's p_settles); ``event`` tells it once
    written."""
    if lease.held is not None:
        raise ValueError("a settlement is held back already: the move between was not made")
    lease.held = {
        "step": step_id,
        "state": state,
        "detail": detail,
        "outcome": outcome,
        "entry": entry,
    }
    lease.held_as = event


def _carried(lease: Lease, settled: Any) -> None:
    """A move carried the settlement held back, and it became ``settled``: note it, and
    hold nothing any more."""
    if lease.held_as is not None:
        event = held_event(lease.held_as, settled)
        if event is not None:
            lease.events.append(event)
    lease.held, lease.held_as = None, None


def lease_call(lease: Lease, function: str, *, seconds: float | None = None, **kwargs: Any) -> Any:
    """Make the lease move ``function`` (a journal function taking ``p_task``, ``p_token``,
    ``p_lease`` and ``p_settles``) under ``lease``: the settlement held back goes with it.

    Returns the function's row. Raises :class:`LeaseLost` when it returned none (the lease
    was taken over: nothing was written), and :class:`TaskMoved` when the settlement held
    back met a report that contradicted it (the conflict is recorded; the move was not
    made). Once the statement has run, the settlement is no longer held, whatever became of
    it; if it raised, it still is, for the next move."""
    held = lease.held
    params: dict[str, Any] = {
        "task": lease.task_id,
        "token": lease.token,
        "lease": seconds if seconds is not None else lease_seconds(),
        **kwargs,
    }
    if held is not None:
        params["settles"] = json.dumps(held, cls=DjangoJSONEncoder)
    row = call(function, **params)
    if row is None:
        lease.held, lease.held_as = None, None
        raise LeaseLost.of(lease)
    _carried(lease, row.get("settled") if isinstance(row, dict) else None)
    if isinstance(row, dict):
        lease.wrote(row.get("version_was"), row.get("task_version"))
        if row.get("settled") == "conflict":
            lease.interrupted = True
            raise TaskMoved(f"step {held and held['step']} was settled otherwise meanwhile")
    return row


def settle_held(lease: Lease, *, seconds: float | None = None) -> None:
    """Write the settlement held back on its own, if there is one (the runner's read of its
    task, a planner that takes time: ``seconds`` stretches the lease in the same statement)."""
    if lease.held is not None or seconds is not None:
        lease_call(lease, "journal_lease_renew", seconds=seconds)


def lease_acquire(*, task_id: UUID, owner: str, seconds: float | None = None) -> Lease | None:
    """Take the task's lease if nobody holds a live one; ``None`` if somebody does.

    Counts the run as failed until :func:`lease_release` says it ended cleanly: a runner that
    dies (SIGKILL, a lost database) leaves the count up, and the next runner sees it.
    """
    row = call(
        "journal_lease_take",
        task=task_id,
        owner=owner,
        lease=seconds if seconds is not None else lease_seconds(),
    )
    if row is None:
        return None
    task = dict(row)
    # Taken at the database's now, in the same statement: the clock the run decides by.
    task["db_now"] = task["lease_taken_at"]
    return Lease(
        task_id=task_id,
        owner=owner,
        token=task["lease_token"],
        failed_runs=task["failed_runs"] - 1,
        version=task["version"],
        task=task,
    )


def lease_release(lease: Lease, *, clean: bool = True) -> None:
    """Give the lease up early (a crashed runner's lease simply expires). ``clean`` says the
    run ended as it should (finished, waiting, handed to a human): the failure count resets.
    A settlement held back is written first."""
    held = lease.held
    row = call(
        "journal_lease_release",
        task=lease.task_id,
        token=lease.token,
        clean=clean,
        settles=json.dumps(held, cls=DjangoJSONEncoder) if held is not None else None,
    )
    _carried(lease, row.settled if row is not None else None)
    lease.released = True
