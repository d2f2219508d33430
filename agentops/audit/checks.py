"""System checks of the declared audits and the audit's settings."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register

from agentops.effects import audits, registry


@register()
def audit_declarations(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    found: list[CheckMessage] = []
    declared = set(registry.tools)  # by name: a tool that cannot be made is said elsewhere
    for provider, audit in audits().items():
        unknown = [t for t in audit.tools if t not in declared]
        if unknown:
            found.append(
                Error(
                    f"the {provider} audit lists the effects of tools nobody declared: "
                    f"{', '.join(unknown)}",
                    hint="Name tools registered with effects.register_tool.",
                    id="agentops.E501",
                )
            )
    for name in ("AUDIT_INTERVAL_SECONDS", "AUDIT_WINDOW_SECONDS", "AUDIT_RESTART_CHECK_SECONDS"):
        if float(getattr(settings, name)) < 0:
            found.append(Error(f"{name} cannot be negative", id="agentops.E502"))
    interval = float(settings.AUDIT_INTERVAL_SECONDS)
    if interval > 0 and float(settings.AUDIT_WINDOW_SECONDS) < interval:
        found.append(
            Error(
                "AUDIT_WINDOW_SECONDS is shorter than AUDIT_INTERVAL_SECONDS: effects made "
                "between two audits would never be audited",
                hint="Make each audit look back at least as far as the time between two.",
                id="agentops.E503",
            )
        )
    return found
