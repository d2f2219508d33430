"""A person's decisions on sagas, from the command line (the dashboard calls the same
services): ``manage.py saga pending | approve | reject | compensate``."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentops.operators.services import task_approve, task_compensate, task_reject
from journal.models import Approval, ApprovalState, Task
from journal.status import TransitionRefused


class Command(BaseCommand):
    help = "List held saga steps; approve or reject one; have a saga compensate now."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        actions.add_parser("pending", help="held steps waiting for a decision")
        approve = actions.add_parser("approve", help="approve the step a task is held before")
        approve.add_argument("task")
        approve.add_argument("--digest", required=True, help="the digest `pending` showed")
        approve.add_argument("--by", required=True, help="who approves (recorded)")
        reject = actions.add_parser("reject", help="reject it: the saga compensates")
        compensate = actions.add_parser("compensate", help="compensate the saga now")
        for sub in (reject, compensate):
            sub.add_argument("task")
            sub.add_argument("--by", required=True, help="who decides (recorded)")
            sub.add_argument("--reason", required=True, help="why (recorded)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "pending":
            for held in Approval.objects.filter(state=ApprovalState.PENDING).order_by(
                "requested_at"
            ):
                self.stdout.write(
                    f"{held.task_id}  {held.tool} {json.dumps(held.args, sort_keys=True)}\n"
                    f"    digest {held.digest}  expires {held.expires_at:%Y-%m-%d %H:%M UTC}  "
                    f"— {held.reason}"
                )
            return
        try:
            task_id = uuid.UUID(options["task"])
            task = Task.objects.get(pk=task_id)
        except (ValueError, Task.DoesNotExist) as exc:
            raise CommandError(f"no such task: {options['task']}") from exc
        try:
            self._act(options, task)
        except TransitionRefused as exc:
            raise CommandError(str(exc)) from exc

    def _act(self, options: dict[str, Any], task: Task) -> None:
        held = task.approvals.filter(state=ApprovalState.PENDING).first()
        if options["action"] == "compensate":
            task_compensate(task_id=task.pk, actor=options["by"], reason=options["reason"])
            self.stdout.write(f"task {task.pk} is compensating")
            return
        if held is None:
            raise CommandError(f"task {task.pk} is not held for a decision")
        if options["action"] == "approve":
            approved = task_approve(
                task_id=task.pk, approval_id=held.pk, digest=options["digest"], actor=options["by"]
            )
            self.stdout.write(
                f"approved: task {task.pk} goes on with {held.tool}"
                if approved
                else f"the request expired: task {task.pk} decides again and asks anew"
            )
        else:
            task_reject(
                task_id=task.pk, approval_id=held.pk, actor=options["by"], reason=options["reason"]
            )
            self.stdout.write(f"rejected: task {task.pk} compensates what it did")
