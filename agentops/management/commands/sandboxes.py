"""``manage.py sandboxes``: the stand-in providers the installed apps declare, as JSON, for the
launcher (``make run``) to start the ones the user did not replace with a real provider."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand

from agentops.effects import registry


class Command(BaseCommand):
    help = "List the sandbox providers the installed apps declare, as JSON."
    requires_system_checks: list[str] = []  # read before the database is even migrated

    def handle(self, *args: Any, **options: Any) -> None:
        declared = [asdict(s) for s in registry.sandboxes.values()]
        self.stdout.write(json.dumps(declared, indent=1))
