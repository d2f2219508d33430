"""Create what the demo needs to be explored: an operator who can log in to the admin."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import IntegrityError, transaction

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


class Command(BaseCommand):
    help = "Create the demo operator login if it is absent. Safe to run on every start."

    def handle(self, *args: Any, **options: Any) -> None:
        self._operator()
        self._tasks()

    def _tasks(self) -> None:
        """A few tasks to watch, started once: the worker runs them as soon as it is up."""
        if Task.objects.filter(goal__startswith=DEMO).exists():
            return
        for kind, goal, refs in DEMO_TASKS:
            task_start(kind=kind, goal=f"{DEMO} {goal}", refs=refs, actor="demo_seed")
        self.stdout.write(f"Demo tasks started: {len(DEMO_TASKS)}.")

    def _operator(self) -> None:
        user_model = get_user_model()
        reset = f"reset with `manage.py changepassword {USERNAME}`"
        if user_model.objects.filter(username=USERNAME).exists():
            self.stdout.write(f"Demo operator login {USERNAME!r} exists ({reset}).")
            return
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
            return
        rule = "=" * 78
        self.stdout.write(
            self.style.SUCCESS(
                f"{rule}\nDemo operator login: {USERNAME} / {password} "
                f"(printed once; {reset})\n{rule}"
            )
        )
