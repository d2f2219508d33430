"""How busy the runners are, for the task list: the jobs waiting in the queue, those due later
(a lookup's time, a retry's backoff), those running now, and the workers listening. Read from
Redis, which only rings the doorbell: PostgreSQL still says what each task is. A Redis that
does not answer is said, never guessed at."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from rq import Worker

from agentops.doorbell import run_queue

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueueNow:
    waiting: int = 0
    scheduled: int = 0
    running: int = 0
    workers: int = 0
    error: str = ""

    @property
    def parts(self) -> tuple[int, int, int, int, str]:
        return (self.waiting, self.scheduled, self.running, self.workers, self.error)


def queue_now() -> QueueNow:
    """The run queue's depth and its workers, in a few Redis round trips."""
    try:
        queue = run_queue()
        return QueueNow(
            waiting=queue.count,
            scheduled=queue.scheduled_job_registry.count,
            running=queue.started_job_registry.count,
            workers=Worker.count(queue=queue),
        )
    except Exception as exc:  # Redis away: the page says so and goes on
        log.warning("the run queue could not be read: %s", type(exc).__name__)
        return QueueNow(error=f"the queue cannot be read now ({type(exc).__name__})")
