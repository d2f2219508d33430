"""The sweeper: ring for every task the journal says is runnable and nobody runs, for every
notification the journal owes (agentops/notifications) that is due and nobody attempts, for
every provider audit that is due or lost, or whose provider restarted (agentops/audit), and
for the journal's retention once a day (agentops/retention.py)."""

from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections

from agentops.audit.services import audits_sweep
from agentops.decisions import decisions_sweep
from agentops.notifications.services import notifications_sweep
from agentops.provider_events import provider_events_sweep
from agentops.retention import retention_sweep
from agentops.runner import tasks_sweep
from agentops.telemetry import instruments

log = logging.getLogger("agentops.sweeper")


class Command(BaseCommand):
    help = (
        "Re-enqueue runnable tasks without a live lease "
        "(after lost jobs, dead workers, an empty Redis)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="sweep once and exit")
        parser.add_argument("--interval", type=float, default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        interval = options["interval"] or settings.SWEEP_INTERVAL_SECONDS
        while True:
            try:
                rung = tasks_sweep()
                # A sweep that ended: agentops_heartbeat_timestamp_seconds{process="sweeper"}.
                instruments.heartbeat(instruments.SWEEPER)
                if rung:
                    log.info("rang for %s runnable task(s)", rung, extra={"rung": rung})
            except Exception as exc:  # a sweep that fails (Redis down) is tried again
                log.warning(
                    "sweep failed: %s: %s", type(exc).__name__, exc, extra={"error": str(exc)}
                )
            # On its own: notifications that cannot be rung for never hold up the tasks.
            try:
                notified = notifications_sweep()
                if notified:
                    log.info("rang for %s notification(s)", notified, extra={"notified": notified})
            except Exception as exc:
                log.warning(
                    "notifications sweep failed: %s: %s",
                    type(exc).__name__,
                    exc,
                    extra={"error": str(exc)},
                )
            # On its own too: a provider that cannot say who answers holds up nothing else.
            try:
                audited = audits_sweep()
                if audited:
                    log.info("rang for %s provider audit(s)", audited, extra={"audits": audited})
            except Exception as exc:
                log.warning(
                    "audit sweep failed: %s: %s",
                    type(exc).__name__,
                    exc,
                    extra={"error": str(exc)},
                )
            # Providers' notifications and people's decisions recorded and not applied yet (a
            # lost ring, a failure).
            try:
                provider_events_sweep()
                decisions_sweep()
            except Exception as exc:
                log.warning(
                    "provider events or decisions sweep failed: %s: %s",
                    type(exc).__name__,
                    exc,
                    extra={"error": str(exc)},
                )
            try:
                retention_sweep()
            except Exception as exc:
                log.warning(
                    "retention sweep failed: %s: %s",
                    type(exc).__name__,
                    exc,
                    extra={"error": str(exc)},
                )
            finally:
                close_old_connections()
            if options["once"]:
                return
            time.sleep(interval)
