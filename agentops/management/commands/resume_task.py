"""Let a task that needs a human go on: ``manage.py resume_task <id> --by you --reason "…"``."""

from __future__ import annotations

import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentops.operators.services import task_resume
from journal.models import Task
from journal.status import TransitionRefused


class Command(BaseCommand):
    help = "Resume a task that needs a human (recorded with who and why), and ring for it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("task", help="the task's id")
        parser.add_argument("--by", required=True, help="who is acting (recorded)")
        parser.add_argument("--reason", required=True, help="why (recorded)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            status = task_resume(
                task_id=uuid.UUID(options["task"]), actor=options["by"], reason=options["reason"]
            )
        except (ValueError, Task.DoesNotExist) as exc:
            raise CommandError(f"no such task: {options['task']}") from exc
        except TransitionRefused as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"task {options['task']} is {status.label} now")
