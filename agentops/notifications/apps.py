from __future__ import annotations

from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    """Notifications out: the agent builder's own endpoint told of a task's status changes."""

    name = "agentops.notifications"
    # Its tables are agentops_notifications_*: listed, column by column, in agentops/dbroles.py.
    label = "agentops_notifications"
    verbose_name = "notifications"

    def ready(self) -> None:
        from agentops.notifications import checks, gauges  # noqa: F401 - registers them
