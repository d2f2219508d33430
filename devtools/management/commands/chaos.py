"""The chaos run: ``manage.py chaos [--tasks 300] [--seed 1] [--harness safe|naive] [--json]``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from devtools.chaos.run import HARNESSES, ChaosRefused, chaos_run, report_lines


class Command(BaseCommand):
    help = (
        "Run N tasks on real workers under a seeded fault schedule, then check the journal "
        "against the providers' ledgers. Exits 0 only when nothing happened twice, nothing "
        "was lost and every compensation balances."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tasks", type=int, default=300)
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--harness", choices=HARNESSES, default="safe")
        parser.add_argument("--workers", type=int, default=3)
        parser.add_argument("--workdir", type=Path, default=None, help="logs (default var/chaos/…)")
        parser.add_argument(
            "--json", action="store_true", help="print the figures as one JSON object, last"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["tasks"] < 1 or options["workers"] < 1:
            raise CommandError("--tasks and --workers must be at least 1")
        try:
            figures = chaos_run(
                tasks=options["tasks"],
                seed=options["seed"],
                harness=options["harness"],
                workers=options["workers"],
                workdir=options["workdir"],
            )
        except ChaosRefused as exc:
            raise CommandError(str(exc)) from exc
        if options["json"]:
            self.stdout.write(json.dumps(figures, sort_keys=False))
        else:
            self.stdout.write("\n".join(report_lines(figures)))
        if not figures["ok"]:
            raise SystemExit(1)
