"""``manage.py audit_providers --since 48h``: match each provider's records, by key, against the
journal now (agentops/audit), and say what was found. The same audit runs daily on its own."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from agentops.audit.models import AuditTrigger
from agentops.audit.services import UnknownProvider, audits_run

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def when(text: str, *, now: datetime) -> datetime:
    """``48h``, ``30m``, ``2d`` (that long ago), or an ISO 8601 time (UTC unless it says)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", text.strip())
    if m:
        return now - timedelta(seconds=float(m.group(1)) * UNITS[m.group(2)])
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise CommandError(
            f"{text!r} is neither a duration (48h, 30m, 2d) nor an ISO 8601 time"
        ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = (
        "Audit the providers' records against the journal over a window: effects with no step, "
        "done steps the provider does not show, amounts, currencies or recipients that differ, "
        "effects undone at the provider that the journal does not know of."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--since", required=True, help="start of the window: 48h, 2d, or an ISO 8601 time"
        )
        parser.add_argument("--until", default="", help="end of the window (default: now)")
        parser.add_argument(
            "--provider",
            action="append",
            default=[],
            help="audit only this provider (repeatable; default: every declared one)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        now = timezone.now()
        since = when(options["since"], now=now)
        until = when(options["until"], now=now) if options["until"] else now
        if since >= until:
            raise CommandError("--since must be before --until")
        try:
            reports = audits_run(
                since=since,
                until=until,
                trigger=AuditTrigger.COMMAND,
                providers=options["provider"],
            )
        except UnknownProvider as exc:
            raise CommandError(str(exc)) from None
        failed = False
        for r in reports:
            if r.error:
                failed = True
                self.stderr.write(f"{r.provider}: could not be listed: {r.error}")
            else:
                self.stdout.write(
                    f"{r.provider}: {r.listed} effect(s) listed, {r.seen} finding(s), {r.found} new"
                )
        if failed:
            raise CommandError("a provider could not be audited: nothing of it was judged")
