"""Create what the demo needs to be explored: an operator who can log in to the admin."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import IntegrityError, transaction

USERNAME = "operator"
EMAIL = "operator@example.com"


class Command(BaseCommand):
    help = "Create the demo operator login if it is absent. Safe to run on every start."

    def handle(self, *args: Any, **options: Any) -> None:
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
