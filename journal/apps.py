from __future__ import annotations

from django.apps import AppConfig


class JournalConfig(AppConfig):
    name = "journal"
    verbose_name = "journal"
    default_auto_field = "django.db.models.BigAutoField"
