"""What the chaos run's modules share: the harnesses, the operator it acts as, the
refusal to start (:class:`ChaosRefused`: nothing was started), and reading the database while
the run restarts it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import django_rq
from django.db import InterfaceError, OperationalError, connections
from rq.worker import Worker

from devtools.chaos.agent import CLIENTS

HARNESSES = ("safe", "naive", "mcp")
OPERATOR = "chaos-operator"

T = TypeVar("T")
DATABASE_ERRORS = (OperationalError, InterfaceError)


class ChaosRefused(Exception):
    """The run cannot start as asked; nothing was started."""


def queue_to_itself() -> None:
    """Refuse to share the queue: another worker (``make run``'s, say) would take the run's
    tasks and act on them against other providers, and the audit would find effects missing."""
    queue = django_rq.get_queue("default")
    workers = Worker.all(queue=queue)
    if workers:
        names = ", ".join(sorted(w.name for w in workers)[:3])
        raise ChaosRefused(
            f"{len(workers)} RQ worker(s) already listen on the queue {queue.name!r} ({names}): "
            "they would run this run's tasks against other providers. Stop them (make run's "
            "worker, for one), or give the run a Redis of its own (REDIS_URL, or make chaos)"
        )


def mcp_clients(run: str) -> list[str]:
    """The names of the API clients the mcp harness's agent calls as (one token each)."""
    return [f"chaos-{run}-{letter}" for letter in CLIENTS]


def db_or(action: Callable[[], T], otherwise: T) -> T:
    """Run a query of the driver's own; while the database is away (the run restarts it),
    say ``otherwise`` and reconnect next time."""
    try:
        return action()
    except DATABASE_ERRORS:
        connections.close_all()
        return otherwise
