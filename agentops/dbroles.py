"""What the app's own database roles may do: the one list to extend when columns are added.

agentops connects to PostgreSQL with a role for each kind of process (docs/security.md;
docs/design.md §4):

- the **owner** (``DATABASE_OWNER_URL``) runs migrations and owns every table and function;
- the roles of ``settings.DATABASE_ROLES``, each for the kinds of process that connect as it
  through their ``DATABASE_URL`` (journal/callers.py): the web role (``people``: the web
  server, the HTTP API, the MCP server) and the worker role (``runner``: the workers and the
  sweeper). They own nothing.

After every ``migrate``, :func:`app_privileges_sync` gives each role exactly what is listed
here for its kinds and nothing more:

- the journal's tables (every table named ``journal_*``): ``SELECT`` only. Every write to
  the journal is one of its functions (docs/design.md §4), and the role may ``EXECUTE``
  exactly those ``journal.callers.MOVES`` lists for its kinds; nobody else may execute any
  function the owner made (PostgreSQL lets everyone execute a new function unless told
  otherwise);
- agentops' own tables, listed column by column: a column the app may ``UPDATE`` is in
  ``updatable``, one it may only write at ``INSERT`` is in ``frozen``. A column of an
  agentops table that is in neither stops the migration with an error naming it, so a new
  column is a decision, never an accident. docs/design.md §4 says why each is safe;
- tables of other apps (auth, sessions, admin, axes) are the framework's business: plain
  ``SELECT, INSERT, UPDATE, DELETE``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from journal.callers import KINDS, callable_by

OWNER_ALIAS = "owner"
"""The connection (settings.DATABASES) that migrates, when DATABASE_OWNER_URL is set."""

MIGRATING: ContextVar[str | None] = ContextVar("agentops_migrating", default=None)
"""The connection `migrate` works on while it runs (set by our migrate command)."""


class MigrationRouter:
    """While `migrate` runs, every ORM query goes to the connection it migrates.

    Data migrations should use ``schema_editor.connection.alias``; some do not (django-rq's
    0003 reads content types through the default manager), and with two roles the default
    connection is the app's, which may not see or change what is being migrated.
    """

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return MIGRATING.get()

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return MIGRATING.get()


ALL = ("*",)
"""Every column, present and future (for ``frozen``: an append-only table)."""


@dataclass(frozen=True)
class Columns:
    """One table's columns as the app role sees them. It may always SELECT and INSERT."""

    updatable: tuple[str, ...]
    frozen: tuple[str, ...]


# agentops' own tables. When a migration adds a column to one of them, add it here: to
# `updatable` if a service changes it after the row is inserted, to `frozen` otherwise.
APP_COLUMNS: dict[str, Columns] = {
    # A provider's notification is stored once, as received, by the web server; a worker
    # fills in what applying it did, and empties the payload once applied.
    "agentops_webhookevent": Columns(
        updatable=("result", "facts", "payload", "applied_at"),
        frozen=("id", "provider", "type", "received_at", "signature"),
    ),
    # An API client (agentops/api/auth.py): its name, token hash and scopes never change; it
    # is revoked once, and every request notes its use and counts it in the rate window.
    "agentops_apiclient": Columns(
        updatable=("revoked_at", "last_used_at", "rate_window", "rate_count"),
        frozen=("id", "name", "prefix", "token_hash", "scopes", "created_at"),
    ),
    # An Idempotency-Key (agentops/api/idempotency.py): completed with the first answer. A key
    # past its expiry starts afresh on the same row (the app may not DELETE), so what it was
    # claimed for (fingerprint, times) is updatable too; whose key it is never changes.
    "agentops_idempotencykey": Columns(
        updatable=(
            "state",
            "response_status",
            "response_body",
            "completed_at",
            "fingerprint",
            "claimed_at",
            "expires_at",
        ),
        frozen=("id", "client_id", "key"),
    ),
    # An intent asked for over MCP (agentops/mcp): what it is never changes; it is linked to
    # the task that carries it, and to a new one only after the last ended with nothing done.
    "agentops_intentkey": Columns(
        updatable=("task_id", "attempts", "updated_at"),
        frozen=("id", "key", "intent", "object", "args", "args_digest", "client_id", "created_at"),
    ),
    # A client's own key for an intent: inserted once, never changed.
    "agentops_intentclientkey": Columns(
        updatable=(),
        frozen=("id", "client_id", "key", "intent_id", "args_digest", "created_at"),
    ),
    # A notification (agentops/notifications): what is sent, under which key and until when,
    # never changes; its attempts are recorded on it.
    "agentops_notifications_delivery": Columns(
        updatable=(
            "state",
            "attempts",
            "next_attempt_at",
            "last_attempt_at",
            "last_status",
            "detail",
            "evidence",
            "misconfigured",
            "settled_at",
        ),
        frozen=("id", "task_id", "entry_id", "event", "key", "payload", "key_until", "created_at"),
    ),
    # How far the journal's entries were turned into notifications: one row, moved forward.
    "agentops_notifications_deliverycursor": Columns(
        updatable=("safe_entry_id", "seen_entry_id", "seen_xmax", "updated_at"),
        frozen=("id",),
    ),
    # An audit of one provider (agentops/audit): its window never changes; how it ended is
    # written once it has.
    "agentops_audit_auditrun": Columns(
        updatable=("finished_at", "listed", "found", "error"),
        frozen=("id", "provider", "trigger", "since", "until", "started_at"),
    ),
    # A finding is stored once, with both sides' evidence as found; a person resolves it once.
    "agentops_audit_finding": Columns(
        updatable=("resolved_at", "resolved_by", "resolution"),
        frozen=(
            "id",
            "provider",
            "kind",
            "effect_id",
            "key",
            "task_id",
            "step_id",
            "run_id",
            "summary",
            "provider_side",
            "journal_side",
            "differences",
            "found_at",
        ),
    ),
    # Who holds a task now (agentops/operators/claims.py): one row per task, kept; a claim,
    # a release or a take-over changes its holder and since when.
    "agentops_taskclaim": Columns(updatable=("holder", "claimed_at"), frozen=("id", "task_id")),
    # Claims, releases, take-overs and notes, with who and when: inserted once, never changed.
    "agentops_taskcoordination": Columns(
        updatable=(), frozen=("id", "task_id", "kind", "actor", "at", "text", "was")
    ),
    # What was last seen of a provider: when its next audit is due, which run answered.
    "agentops_audit_providerwatch": Columns(
        updatable=("next_audit_at", "audited_at", "address", "boot", "checked_at"),
        frozen=("id", "provider"),
    ),
}

# The journal's tables: the app only reads them, and writes through the journal's functions.
JOURNAL_PREFIX = "journal_"

# The functions of agentops' own apps the app may execute: forgetting what the journal's
# retention dropped (security definers, each doing only that: agentops/retention.py).
APP_FUNCTIONS = (
    "agentops_webhook_events_forget",
    "agentops_audit_forget",
    "agentops_notifications_forget",
    "agentops_coordination_forget",
)

# Apps whose every table must be listed in APP_COLUMNS.
LISTED_APPS = ("agentops",)

# Django's record of applied migrations: the app reads it (the migration check of `check`)
# and never writes it.
READ_ONLY_TABLES = ("django_migrations",)


class PrivilegeListError(Exception):
    """The schema and APP_COLUMNS disagree; the message says what to add or remove."""


def _quote(connection: BaseDatabaseWrapper, name: str) -> str:
    return str(connection.ops.quote_name(name))


def _table_columns(connection: BaseDatabaseWrapper) -> dict[str, list[str]]:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.relname, a.attname
              FROM pg_class c
              JOIN pg_namespace n ON n.oid = c.relnamespace
              JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
             WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
               AND NOT c.relispartition
             ORDER BY c.relname, a.attnum
            """
        )
        tables: dict[str, list[str]] = {}
        for table, column in cursor.fetchall():
            tables.setdefault(table, []).append(column)
    return tables


def _checked(tables: dict[str, list[str]]) -> None:
    problems: list[str] = []
    for table, columns in sorted(tables.items()):
        listed = APP_COLUMNS.get(table)
        if listed is None:
            if table.split("_", 1)[0] in LISTED_APPS:
                problems.append(f"table {table} is not listed")
            continue
        if listed.frozen == ALL:
            continue
        known = set(listed.updatable) | set(listed.frozen)
        problems += [f"column {table}.{c} is not listed" for c in columns if c not in known]
        problems += [f"{table}.{c} is listed but does not exist" for c in known - set(columns)]
    problems += [f"table {t} is listed but does not exist" for t in set(APP_COLUMNS) - set(tables)]
    if problems:
        raise PrivilegeListError(
            "agentops/dbroles.py APP_COLUMNS does not match the schema: "
            + "; ".join(problems)
            + ". List each agentops column as `updatable` (a service changes it after INSERT) "
            "or `frozen`."
        )


def app_privileges_sql(
    connection: BaseDatabaseWrapper,
    *,
    app_role: str,
    tables: dict[str, list[str]],
    functions: list[str],
    kinds: tuple[str, ...] = KINDS,
) -> list[str]:
    """The statements that leave ``app_role`` with exactly the privileges listed here, for a
    process of ``kinds`` (journal.callers): ``functions`` are those the owner made."""
    role = _quote(connection, app_role)
    database = _quote(connection, str(connection.settings_dict["NAME"]))
    statements = [
        # No temporary tables: one named like a journal table would be searched first by any
        # function that does not pin its search path (migration 0009 pins the journal's).
        f"REVOKE TEMPORARY ON DATABASE {database} FROM PUBLIC",
        f"REVOKE TEMPORARY ON DATABASE {database} FROM {role}",
        # Nothing but our grants: PostgreSQL before 15 let everyone create in `public`. (Run
        # by a role that does not own the schema, this only warns; 15 and later need none.)
        "REVOKE CREATE ON SCHEMA public FROM PUBLIC",
        f"GRANT USAGE ON SCHEMA public TO {role}",
        # nextval() for identity columns, not setval() (that needs UPDATE).
        f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {role}",
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}",
        # PostgreSQL lets everyone execute a function unless told otherwise: nobody may
        # execute one the owner makes from now on but whom it is granted to.
        "ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC",
    ]
    allowed = {name for kind in kinds for name in callable_by(kind)} | set(APP_FUNCTIONS)
    for function in sorted(functions):
        name = _quote(connection, function)
        statements.append(f"REVOKE ALL ON FUNCTION {name} FROM PUBLIC, {role}")
        if function in allowed:
            statements.append(f"GRANT EXECUTE ON FUNCTION {name} TO {role}")
    for table in sorted(tables):
        name = _quote(connection, table)
        statements.append(f"REVOKE ALL ON TABLE {name} FROM {role}")
        listed = APP_COLUMNS.get(table)
        if listed is not None:
            statements.append(f"GRANT SELECT, INSERT ON TABLE {name} TO {role}")
            if listed.updatable:
                columns = ", ".join(_quote(connection, c) for c in listed.updatable)
                statements.append(f"GRANT UPDATE ({columns}) ON TABLE {name} TO {role}")
        elif table in READ_ONLY_TABLES or table.startswith(JOURNAL_PREFIX):
            statements.append(f"GRANT SELECT ON TABLE {name} TO {role}")
        else:
            statements.append(f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE {name} TO {role}")
    return statements


def _owned_functions(connection: BaseDatabaseWrapper) -> list[str]:
    """The functions in the current schema that the connected role (the owner) made."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT DISTINCT p.proname
              FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = current_schema() AND p.proowner = current_user::regrole
            """
        )
        return [name for (name,) in cursor.fetchall()]


def _missing_roles(connection: BaseDatabaseWrapper, roles: list[str]) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolname FROM pg_roles WHERE rolname = ANY(%s)", [roles])
        found = {name for (name,) in cursor.fetchall()}
    return [role for role in roles if role not in found]


def app_privileges_sync(
    *, connection: BaseDatabaseWrapper, roles: Mapping[str, Sequence[str]]
) -> int:
    """Give each role of ``roles`` (settings.DATABASE_ROLES: a role and the kinds of process
    that connect as it) exactly the listed privileges on every table and function; run as
    the owner.

    Idempotent: it revokes everything first, then grants. Returns the number of tables.
    Raises :class:`PrivilegeListError` if an agentops column is not listed or a role does
    not exist.
    """
    tables = _table_columns(connection)
    _checked(tables)
    missing = _missing_roles(connection, list(roles))
    if missing:
        raise PrivilegeListError(
            f"the database roles {', '.join(missing)} (DATABASE_ROLES) do not exist: create "
            "each as the database's administrator (CREATE ROLE <name> LOGIN PASSWORD '...', no "
            "other attribute) and run migrate again"
        )
    functions = _owned_functions(connection)
    # One transaction: a running app never sees the moment between REVOKE and GRANT.
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        for role, kinds in roles.items():
            for statement in app_privileges_sql(
                connection, app_role=role, tables=tables, functions=functions, kinds=tuple(kinds)
            ):
                cursor.execute(statement)
    return len(tables)
