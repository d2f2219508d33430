"""RQ jobs: they take ids (JSON), re-read the database, and call one service."""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

from django.conf import settings
from django.db import close_old_connections

from agentops.audit.services import audit_due
from agentops.notifications.services import delivery_attempt, notifications_after_run
from agentops.runner import task_run


def run_task(task_id: str) -> str:
    # Workers run job after job in one process: never reuse a connection that went stale.
    close_old_connections()
    try:
        stopped = task_run(task_id=UUID(task_id)).stopped
        # A doorbell: the sweeper derives the same notifications if this is lost.
        notifications_after_run(stopped=stopped)
        return stopped
    finally:
        close_old_connections()


def deliver_notification(delivery_id: int) -> str:
    close_old_connections()
    try:
        return delivery_attempt(delivery_id=int(delivery_id))
    finally:
        close_old_connections()


def audit_provider(trigger: str, provider: str) -> str:
    close_old_connections()
    try:
        return audit_due(provider=str(provider), trigger=str(trigger))
    finally:
        close_old_connections()


def apply_provider_event(provider: str, event_id: str) -> str:
    """A provider's notification, stored by the web server: verified and applied here."""
    from agentops.provider_events import provider_event_apply

    close_old_connections()
    try:
        return provider_event_apply(provider=str(provider), event_id=str(event_id))
    finally:
        close_old_connections()


def apply_person_decision(decision_id: int) -> str:
    """A person's decision about a step, recorded by the web server: applied here."""
    from agentops.decisions import decision_apply

    close_old_connections()
    try:
        return decision_apply(decision_id=int(decision_id))
    finally:
        close_old_connections()


def journal_retain() -> int:
    """The journal's retention: partitions made ahead, every range that may go dropped (and
    archived first to JOURNAL_ARCHIVE_DIR, when set); how many tasks went."""
    from agentops.retention import journal_retain as retain

    close_old_connections()
    try:
        archive = settings.JOURNAL_ARCHIVE_DIR
        return retain(archive_dir=Path(archive) if archive else None).tasks_dropped
    finally:
        close_old_connections()
