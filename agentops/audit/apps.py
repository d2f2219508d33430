from __future__ import annotations

from django.apps import AppConfig


class AuditConfig(AppConfig):
    """The provider audit: the providers' records matched, by key, against the journal."""

    name = "agentops.audit"
    # Its tables are agentops_audit_*: listed, column by column, in agentops/dbroles.py.
    label = "agentops_audit"
    verbose_name = "provider audit"

    def ready(self) -> None:
        from agentops.audit import checks, gauges  # noqa: F401 - registers them
