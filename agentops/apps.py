from __future__ import annotations

from django.apps import AppConfig


class AgentopsConfig(AppConfig):
    name = "agentops"
    verbose_name = "agentops"

    def ready(self) -> None:
        from agentops import checks  # noqa: F401 - registers the system checks
