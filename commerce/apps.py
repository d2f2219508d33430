from __future__ import annotations

from django.apps import AppConfig


class CommerceConfig(AppConfig):
    name = "commerce"
    verbose_name = "Shipped kinds: renewals, trips, reminders"
