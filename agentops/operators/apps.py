from __future__ import annotations

from django.apps import AppConfig


class OperatorsConfig(AppConfig):
    """The operators' pages: tasks needing a person first, each step's truth, and actions."""

    name = "agentops.operators"
    label = "operators"
    verbose_name = "operators"
