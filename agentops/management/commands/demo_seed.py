"""Create what the demo needs to be explored: an operator who can log in to the admin, and
the tasks the installed apps give the demo (``effects.register_demo``), started once."""

from __future__ import annotations

import io
import json
import secrets
import time
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, OutputWrapper
from django.db import IntegrityError, transaction

from agentops.effects import DemoTask, registry, task_start
from journal.models import Task

USERNAME = "operator"
EMAIL = "operator@example.com"


DEMO = "Demo:"


def demo_goal(task: DemoTask) -> str:
    return f"{DEMO} {task.goal}"


class Command(BaseCommand):
    help = (
        "Create the demo operator login if it is absent, and start the installed apps' demo "
        "tasks once. Safe to run on every start."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--summary",
            action="store_true",
            help="Print only one JSON object: the login, its password when it was created "
            "now (else null), and the pages of the demo tasks their apps point to. `make run` "
            "shows it once the app is up.",
        )
        parser.add_argument(
            "--wait",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="First wait, at most this long, until no demo task is runnable or waiting "
            "(a worker has run them).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["summary"]:
            self._operator()
            self._tasks()
            for page in self._pages():
                self.stdout.write(f"{page['label']} of {page['task']}: {page['url']}")
            return
        quiet = OutputWrapper(io.StringIO())
        self.stdout, kept = quiet, self.stdout
        try:
            password = self._operator()
            self._tasks()
        finally:
            self.stdout = kept
        self._settled(within=options["wait"])
        summary = {"login": USERNAME, "password": password, "pages": self._pages()}
        self.stdout.write(json.dumps(summary))

    def _settled(self, *, within: float) -> None:
        deadline = time.monotonic() + within
        demo = Task.objects.filter(goal__startswith=DEMO, status__in=("runnable", "waiting"))
        while demo.exists() and time.monotonic() < deadline:
            time.sleep(0.2)

    def _pages(self) -> list[dict[str, str]]:
        """The pages of the demo tasks that say what they show (each app's links to a task,
        such as a customer's page), with AGENTOPS_BASE_URL before the path."""
        pages = []
        for demo in registry.demos:
            if not demo.shows:
                continue
            task = Task.objects.filter(goal=demo_goal(demo)).order_by("created_at").first()
            for link in registry.links if task is not None else ():
                path = link.url(task)
                if path:
                    pages.append(
                        {
                            "task": demo.name or demo.goal,
                            "label": link.label,
                            "shows": demo.shows,
                            "url": f"{settings.AGENTOPS_BASE_URL}{path}",
                        }
                    )
        return pages

    def _tasks(self) -> None:
        """The installed apps' demo tasks, each started once (by its goal): the worker runs
        them as soon as it is up."""
        started = 0
        for demo in registry.demos:
            if Task.objects.filter(goal=demo_goal(demo)).exists():
                continue
            task_start(
                kind=demo.kind, goal=demo_goal(demo), refs=dict(demo.refs), actor="demo_seed"
            )
            started += 1
        if started:
            self.stdout.write(f"Demo tasks started: {started}.")

    def _operator(self) -> str | None:
        """Create the login unless it exists; its password when created now, else None."""
        user_model = get_user_model()
        reset = f"reset with `manage.py changepassword {USERNAME}`"
        if user_model.objects.filter(username=USERNAME).exists():
            self.stdout.write(f"Demo operator login {USERNAME!r} exists ({reset}).")
            return None
        # Random per machine, so no demo ships with a known admin password; shown only now.
        password = secrets.token_urlsafe(12)
        try:
            with transaction.atomic():
                user_model.objects.create_superuser(
                    username=USERNAME, email=EMAIL, password=password
                )
        except IntegrityError:
            # Another demo_seed created it between our check and our insert.
            self.stdout.write(f"Demo operator login {USERNAME!r} exists ({reset}).")
            return None
        rule = "=" * 78
        self.stdout.write(
            self.style.SUCCESS(
                f"{rule}\nDemo operator login: {USERNAME} / {password} "
                f"(printed once; {reset})\n{rule}"
            )
        )
        return password
