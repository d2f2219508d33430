from __future__ import annotations

from django.apps import AppConfig


class AgentopsConfig(AppConfig):
    name = "agentops"
    verbose_name = "agentops"
