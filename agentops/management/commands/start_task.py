"""Start a task: ``manage.py start_task <kind> --goal "…" --refs '{…}'`` (docs/getting-started.md,
has one of the shipped kinds')."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentops.effects import task_start
from agentops.kinds import TaskRefused, UnknownKind


class Command(BaseCommand):
    help = "Record a task and enqueue its runner."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("kind", help="the task's kind: one an installed app declares")
        parser.add_argument("--goal", required=True)
        parser.add_argument("--refs", default="{}", help="business references, as JSON")
        parser.add_argument(
            "--plan",
            default=None,
            help='a saga\'s plan, as JSON: [{"tool": "<a tool of the kind>"}, {"tool": '
            '"<another>", "hold": true}, ...], "hold" holding that step for a person\'s '
            "approval (default: the kind's own)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            refs = json.loads(options["refs"])
        except json.JSONDecodeError as exc:
            raise CommandError(f"--refs is not JSON: {exc}") from exc
        if not isinstance(refs, dict):
            raise CommandError("--refs must be a JSON object")
        plan = None
        if options["plan"] is not None:
            try:
                plan = json.loads(options["plan"])
            except json.JSONDecodeError as exc:
                raise CommandError(f"--plan is not JSON: {exc}") from exc
        try:
            task = task_start(
                kind=options["kind"], goal=options["goal"], refs=refs, actor="cli", plan=plan
            )
        except UnknownKind as exc:
            raise CommandError(str(exc)) from exc
        except TaskRefused as exc:
            raise CommandError("the task was not started: " + "; ".join(exc.problems)) from exc
        self.stdout.write(str(task.pk))
