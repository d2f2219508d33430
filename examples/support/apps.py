from __future__ import annotations

from django.apps import AppConfig


class SupportConfig(AppConfig):
    name = "examples.support"
    label = "support"
    verbose_name = "Example: support goodwill"
