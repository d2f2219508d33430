"""The chaos run: ``manage.py chaos [--tasks 300] [--seed 1] [--harness safe|naive|mcp]
[--json]``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from devtools.chaos.report import report_lines
from devtools.chaos.run import HARNESSES, ChaosRefused, chaos_run


class Command(BaseCommand):
    help = (
        "Run N tasks on real workers under a seeded fault schedule, then check the journal "
        "against the providers' ledgers. Exits 0 only when nothing happened twice, nothing "
        "was lost or left unknown, nobody was asked to step in but whom the plan meant to "
        "be, every compensation balances, every summary (and, over MCP, every answer) is "
        "true; otherwise exits 1 and says why."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tasks", type=int, default=300)
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--harness", choices=HARNESSES, default="safe")
        parser.add_argument("--workers", type=int, default=3)
        parser.add_argument("--workdir", type=Path, default=None, help="logs (default var/chaos/…)")
        parser.add_argument(
            "--refuse-us",
            type=int,
            default=0,
            metavar="N",
            help="the payment provider refuses us (421) for the first N charges: each of "
            "those tasks, and only they, must end needing a person (default 0: nobody)",
        )
        parser.add_argument(
            "--cluster",
            action="store_true",
            help="the run's PostgreSQL is a Patroni cluster that `python -m "
            "devtools.chaos.cluster` started (`make chaos-cluster`): its faults (a failover, a "
            "switchover, the primary cut off, Redis emptied, a rolling deploy) join the plan",
        )
        parser.add_argument(
            "--short",
            action="store_true",
            help="with --cluster: one failover and one partition only (the run `make test` makes)",
        )
        parser.add_argument(
            "--json", action="store_true", help="print the figures as one JSON object, last"
        )
        parser.add_argument(
            "--out", type=Path, default=None, help="also write the figures, as JSON, to this file"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["tasks"] < 1 or options["workers"] < 1 or options["refuse_us"] < 0:
            raise CommandError("--tasks and --workers must be at least 1, --refuse-us 0 or more")
        try:
            figures = chaos_run(
                tasks=options["tasks"],
                seed=options["seed"],
                harness=options["harness"],
                workers=options["workers"],
                workdir=options["workdir"],
                refusals=options["refuse_us"],
                cluster=options["cluster"],
                short=options["short"],
            )
        except ChaosRefused as exc:
            raise CommandError(str(exc)) from exc
        if options["out"] is not None:
            options["out"].parent.mkdir(parents=True, exist_ok=True)
            options["out"].write_text(json.dumps(figures, indent=1) + "\n")
        if options["json"]:
            self.stdout.write(json.dumps(figures, sort_keys=False))
        else:
            self.stdout.write("\n".join(report_lines(figures)))
        if not figures["ok"]:
            for reason in figures["failed"]:
                self.stderr.write(f"chaos run failed: {reason}")
            raise SystemExit(1)
