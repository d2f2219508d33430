"""Redis is only a doorbell (docs/design.md §4): PostgreSQL says what must happen, and a ring
has a worker look now. Losing a ring loses nothing: the sweeper finds what the journal says
is due and rings again.

Every ring a worker answers is made here or by the service that owns the job (a
notification's attempt, a provider's audit, the retention), on the one queue each process
keeps (:func:`run_queue`). This module knows the jobs by name only (agentops.workers) and
imports no service: the extension API (agentops.effects) starts tasks and stores provider
events, and rings for them, through it.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any
from uuid import UUID

import django_rq
from django.conf import settings

from agentops.workers import APPLY_DECISION_JOB, APPLY_EVENT_JOB, RUN_JOB

# Set when a task was rung for, for SWEEP_GRACE_SECONDS: the sweeper leaves it alone meanwhile.
RANG_KEY = "agentops:rang:{}"

_queues: dict[int, Any] = {}


def run_queue() -> Any:
    """The queue every ring goes on, one per process with its connection pool kept:
    django_rq makes a new client, pool and connection on every call (and redis-py reads its
    own package metadata for each new connection: milliseconds per ring). A pool reconnects
    by itself after Redis restarts; a forked child makes its own."""
    queue = _queues.get(os.getpid())
    if queue is None:
        queue = _queues[os.getpid()] = django_rq.get_queue("default")
    return queue


def _options(description: str) -> dict[str, Any]:
    return {
        "job_timeout": settings.RUN_JOB_TIMEOUT_SECONDS,
        # What a job did is in the database: RQ keeps no result (a failure, for a week).
        "result_ttl": 0,
        "failure_ttl": 7 * 24 * 3600,
        "description": description,
    }


def task_ring(*, task_id: UUID, at: datetime | None = None, quiet: float | None = None) -> None:
    """Enqueue a run of the task, now or at ``at``. Losing this loses nothing (the sweeper).

    The sweeper leaves the task alone for ``quiet`` seconds (SWEEP_GRACE_SECONDS)."""
    queue = run_queue()
    options = _options(f"run task {task_id}")
    rang = RANG_KEY.format(task_id)
    quiet_ms = max(1, round(1000 * (settings.SWEEP_GRACE_SECONDS if quiet is None else quiet)))
    if at is None:
        # The job and the note that it was rung for, in one round trip.
        with queue.connection.pipeline() as pipe:
            queue.enqueue(RUN_JOB, str(task_id), pipeline=pipe, **options)
            pipe.set(rang, "1", px=quiet_ms)
            pipe.execute()
    else:
        queue.enqueue_at(at, RUN_JOB, str(task_id), **options)
        queue.connection.set(rang, "1", px=quiet_ms)


def decision_ring(*, decision_id: int) -> None:
    """Have a worker apply a person's decision (agentops.decisions). Losing this loses
    nothing (the sweeper)."""
    run_queue().enqueue(
        APPLY_DECISION_JOB, decision_id, **_options(f"apply a person's decision {decision_id}")
    )


def provider_event_ring(*, provider: str, event_id: str) -> None:
    """Have a worker apply a stored provider event (agentops.provider_events). Losing this
    loses nothing (the sweeper)."""
    run_queue().enqueue(
        APPLY_EVENT_JOB, provider, event_id, **_options(f"apply {provider} event {event_id}")
    )
