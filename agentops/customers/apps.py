from __future__ import annotations

from django.apps import AppConfig


class CustomersConfig(AppConfig):
    """The customer's payment page: one per invoice, at a signed link, three states."""

    name = "agentops.customers"
    label = "customers"
    verbose_name = "customers"
