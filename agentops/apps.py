from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class AgentopsConfig(AppConfig):
    name = "agentops"
    verbose_name = "agentops"

    def ready(self) -> None:
        from agentops import checks  # noqa: F401 - registers the system checks
        from agentops.effects import autodiscover
        from agentops.telemetry import checks as telemetry_checks  # noqa: F401 - idem

        # Every installed app's tools, kinds, playbooks and providers (its effects module).
        autodiscover()

        # Privileges follow the schema: after every migrate, not in one migration, because
        # every later migration may add a table or a column.
        post_migrate.connect(_app_privileges_after_migrate, sender=self)


def _app_privileges_after_migrate(*, using: str, verbosity: int = 1, **kwargs: Any) -> None:
    from django.conf import settings
    from django.db import DEFAULT_DB_ALIAS, connections

    from agentops.dbroles import app_privileges_sync
    from journal.retention import partitions_ensure, retention_configure

    # The journal's retention as the settings say, written by the tables' owner (once the
    # journal has its table: a migrate to an older state leaves it alone).
    if "journal_retention" in connections[using].introspection.table_names():
        keep = settings.JOURNAL_RETAIN_SECONDS
        retention_configure(
            using=using,
            partition_seconds=settings.JOURNAL_PARTITION_SECONDS,
            ahead=settings.JOURNAL_PARTITIONS_AHEAD,
            keep_seconds=keep if keep > 0 else None,
        )
        partitions_ensure(using=using)  # the ranges of now and ahead, of that width

    app_role = settings.DATABASES[DEFAULT_DB_ALIAS].get("USER") or ""
    migrating_role = connections[using].settings_dict.get("USER") or ""
    if not app_role or app_role == migrating_role:
        if verbosity:
            print(
                "agentops: the app connects as the role that owns its tables, so the database "
                "cannot hold the journal's rules against it; set DATABASE_OWNER_URL "
                "(docs/security.md)"
            )
        return
    roles = {r: k for r, k in settings.DATABASE_ROLES.items() if r != migrating_role}
    tables = app_privileges_sync(connection=connections[using], roles=roles)
    if verbosity:
        named = ", ".join(f"{role!r} ({'+'.join(kinds)})" for role, kinds in roles.items())
        print(f"agentops: privileges of roles {named} synced on {tables} tables")
