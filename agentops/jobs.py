"""RQ jobs: they take ids (JSON), re-read the database, and call one service."""

from __future__ import annotations

from uuid import UUID

from django.db import close_old_connections

from agentops.runner import task_run


def run_task(task_id: str) -> str:
    # Workers run job after job in one process: never reuse a connection that went stale.
    close_old_connections()
    try:
        return task_run(task_id=UUID(task_id)).stopped
    finally:
        close_old_connections()
