"""Create what the demo needs to be explored: an operator who can log in to the admin."""

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

from agentops.effects import registry
from agentops.runner import task_start
from journal.models import Task

USERNAME = "operator"
EMAIL = "operator@example.com"


DEMO = "Demo:"
DEMO_TASKS: list[tuple[str, str, dict[str, Any]]] = [
    (
        "renewal",
        "renew Ada's subscription: charge INV-2291, email the receipt",
        {"invoice": "INV-2291", "amount": 4900, "email": "ada@example.com"},
    ),
    (
        "renewal",
        "renew Grace's subscription (her card is declined)",
        {
            "invoice": "INV-2292",
            "amount": 4900,
            "email": "grace@example.com",
            "payment_method": "pm_card_chargeDeclined",
        },
    ),
    (
        "trip",
        "book Alan's trip to Lisbon",
        {
            "invoice": "TRIP-7",
            "amount": 84000,
            "email": "alan@example.com",
            "flight": "TP1351",
            "traveller": "Alan Turing",
            "hotel": "Alfama",
            "check_in": "2027-03-01",
            "check_out": "2027-03-04",
        },
    ),
    (
        "trip",
        "book Ada's conference trip (above 3,000.00: the charge waits for an operator)",
        {
            "invoice": "TRIP-8",
            "amount": 420000,
            "email": "ada@example.com",
            "flight": "BA492",
            "traveller": "Ada Lovelace",
            "hotel": "Chiado",
            "check_in": "2027-04-12",
            "check_out": "2027-04-16",
        },
    ),
    (
        "reminders",
        "remind two customers of overdue invoices",
        {
            "invoices": [
                {"invoice": "INV-2101", "email": "edsger@example.com"},
                {"invoice": "INV-2102", "email": "barbara@example.com"},
            ]
        },
    ),
]


# The demo invoices whose customer's page the summary of `make run` links to, and what each
# shows once the worker has run its task.
CUSTOMER_PAGES = (
    ("INV-2292", "declined: pay with another card"),
    ("INV-2291", "paid"),
)


class Command(BaseCommand):
    help = "Create the demo operator login if it is absent. Safe to run on every start."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--summary",
            action="store_true",
            help="Print only one JSON object: the login, its password when it was created "
            "now (else null), and the demo invoices' customer pages. `make run` shows it "
            "once the app is up.",
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
            for page in self._customer_pages():
                self.stdout.write(f"Customer's page of {page['invoice']}: {page['url']}")
            return
        quiet = OutputWrapper(io.StringIO())
        self.stdout, kept = quiet, self.stdout
        try:
            password = self._operator()
            self._tasks()
        finally:
            self.stdout = kept
        self._settled(within=options["wait"])
        summary = {"login": USERNAME, "password": password, "pages": self._customer_pages()}
        self.stdout.write(json.dumps(summary))

    def _settled(self, *, within: float) -> None:
        deadline = time.monotonic() + within
        demo = Task.objects.filter(goal__startswith=DEMO, status__in=("runnable", "waiting"))
        while demo.exists() and time.monotonic() < deadline:
            time.sleep(0.2)

    def _customer_pages(self) -> list[dict[str, str]]:
        """The demo invoices' customer pages (as the shipped kinds link a task to it), with
        AGENTOPS_BASE_URL before the path."""
        pages = []
        for invoice, shows in CUSTOMER_PAGES:
            task = (
                Task.objects.filter(goal__startswith=DEMO, refs__invoice=invoice)
                .order_by("created_at")
                .first()
            )
            for link in registry.links if task is not None else ():
                path = link.url(task)
                if path:
                    url = f"{settings.AGENTOPS_BASE_URL}{path}"
                    pages.append({"invoice": invoice, "shows": shows, "url": url})
                    break
        return pages

    def _tasks(self) -> None:
        """A few tasks to watch, started once: the worker runs them as soon as it is up."""
        if Task.objects.filter(goal__startswith=DEMO).exists():
            return
        for kind, goal, refs in DEMO_TASKS:
            task_start(kind=kind, goal=f"{DEMO} {goal}", refs=refs, actor="demo_seed")
        self.stdout.write(f"Demo tasks started: {len(DEMO_TASKS)}.")

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
