"""System checks of the notification settings: refused at start rather than found out at the
first event."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register

LOOPBACK = {"localhost", "127.0.0.1", "::1"}


@register()
def notify_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    from agentops.notifications.services import EVENTS

    url = settings.NOTIFY_URL
    found: list[CheckMessage] = []
    unknown = [e for e in settings.NOTIFY_EVENTS if e not in EVENTS]
    if unknown:
        found.append(
            Error(
                f"NOTIFY_EVENTS names events that do not exist: {', '.join(unknown)}",
                hint=f"Choose among {', '.join(EVENTS)}.",
                id="agentops.E401",
            )
        )
    if not url:
        return found
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        found.append(
            Error(
                f"NOTIFY_URL is not an http(s) address: {url!r}",
                hint="Set it to the receiver's full address, https://hooks.example.com/agentops.",
                id="agentops.E402",
            )
        )
    if not settings.NOTIFY_SECRET:
        found.append(
            Error(
                "NOTIFY_URL is set without NOTIFY_SECRET: notifications would be unsigned, and "
                "none is sent",
                hint="Set NOTIFY_SECRET to a long random string the receiver also holds.",
                id="agentops.E403",
            )
        )
    if not settings.NOTIFY_RETRY_SCHEDULE or min(settings.NOTIFY_RETRY_SCHEDULE) <= 0:
        found.append(
            Error(
                "NOTIFY_RETRY_SCHEDULE needs at least one delay, each above 0 seconds",
                id="agentops.E404",
            )
        )
    if parts.scheme == "http" and parts.hostname not in LOOPBACK and not settings.DEBUG:
        found.append(
            Warning(
                "NOTIFY_URL is plain http: anyone on the way reads what tasks did (the "
                "signature only proves who sent it)",
                hint="Use https.",
                id="agentops.W401",
            )
        )
    return found
