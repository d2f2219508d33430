"""``migrate``, run as the role that owns the tables when one is configured.

With ``DATABASE_OWNER_URL`` set, settings define a second connection, ``owner``, and
migrations default to it: the app's own role (``DATABASE_URL``) may not create or alter
tables. After migrating, the app role's privileges are synced (``agentops.apps``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.commands import migrate
from django.db import DEFAULT_DB_ALIAS

from agentops.dbroles import MIGRATING, OWNER_ALIAS


class Command(migrate.Command):
    def add_arguments(self, parser: Any) -> None:
        super().add_arguments(parser)
        owner = OWNER_ALIAS if OWNER_ALIAS in settings.DATABASES else DEFAULT_DB_ALIAS
        parser.set_defaults(database=owner)

    def handle(self, *args: Any, **options: Any) -> None:
        token = MIGRATING.set(options["database"])
        try:
            super().handle(*args, **options)
        finally:
            MIGRATING.reset(token)
