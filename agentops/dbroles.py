"""What the app's own database role may do: the one list to extend when columns are added.

agentops connects to PostgreSQL with two roles (README, "Security model"):

- the **owner** (``DATABASE_OWNER_URL``) runs migrations and owns every table;
- the **app** (``DATABASE_URL``), which the web server and the workers use, owns nothing.

After every ``migrate``, :func:`app_privileges_sync` gives the app role exactly what is
listed here and nothing more. The journal's tables are listed column by column: a column
the app may ``UPDATE`` is in ``updatable``, one it may only write at ``INSERT`` is in
``frozen``. A column of a journal or agentops table that is in neither stops the migration
with an error naming it, so a new column is a decision, never an accident. Tables of other
apps (auth, sessions, admin, axes) are the framework's business: the app gets plain
``SELECT, INSERT, UPDATE, DELETE`` on them.

The freeze that holds even for writes the app may make (a settled step, a task's goal and
refs) is a trigger: ``journal/sql/journal_step_settled_frozen`` and
``journal_task_facts_frozen``. docs/design.md §4 says why each column listed here is safe.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

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


# The journal's transitions (journal/leases.py, record.py, settle.py) update only these.
# When a migration adds a column to one of these tables, add it here: to `updatable` if a
# service changes it after the row is inserted, to `frozen` otherwise.
APP_COLUMNS: dict[str, Columns] = {
    "journal_task": Columns(
        updatable=(
            "status",
            "attention",
            "attention_code",
            "wake_at",
            "step_count",
            "lease_owner",
            "lease_token",
            "lease_expires_at",
            "lease_taken_at",
            "version",
            "failed_runs",
            "unwinding",
            "shortfall",
        ),
        frozen=("id", "kind", "goal", "refs", "plan", "created_at"),
    ),
    "journal_step": Columns(
        updatable=(
            "state",
            "detail",
            "outcome",
            "attempts",
            "lookups",
            "settled_at",
            "next_check_at",
            "offset_by_id",
        ),
        frozen=(
            "id",
            "task_id",
            "n",
            "kind",
            "tool",
            "args",
            "key",
            "cost",
            "guard",
            "guard_key",
            "once",
            "offsets_id",
            "retries",
            "refusal",
            "undo_tool",
            "first_started_at",
            "key_trusted_until",
            "lookup_until",
            "decision",
            "created_at",
        ),
    ),
    # An approval is decided once and used once (the trigger journal/sql/journal_approval_rules).
    "journal_approval": Columns(
        updatable=("state", "decided_by", "decided_at", "decision_reason", "used_by_id"),
        frozen=("id", "task_id", "tool", "args", "digest", "reason", "requested_at", "expires_at"),
    ),
    # Append-only: INSERT and SELECT, never UPDATE or DELETE (docs/design.md §4).
    "journal_entry": Columns(updatable=(), frozen=ALL),
    # A webhook event is stored once; only the result of applying it is filled in after.
    "agentops_webhookevent": Columns(
        updatable=("result",), frozen=("id", "provider", "type", "facts", "received_at")
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
    # What was last seen of a provider: when its next audit is due, which run answered.
    "agentops_audit_providerwatch": Columns(
        updatable=("next_audit_at", "audited_at", "address", "boot", "checked_at"),
        frozen=("id", "provider"),
    ),
}

# The guards' claims (journal migration 0012): kept by the database's own trigger
# (journal_step_claims, a security definer), never written by the app, which only reads
# them. A claim the app could delete would let an object's once-only effect happen twice.
CLAIM_TABLES = ("journal_object_live", "journal_object_once", "journal_step_undo")

# The journal's partitions and its retention (journal migration 0015, docs/design.md §17):
# kept by the database's own functions (security definers) and by the owner; the app only
# reads them. A partition the app could list or a keep it could shorten would let it drop
# what is not yet due. The partitions themselves are the owner's alone: the app reaches
# their rows through their tables (journal_task, journal_step, journal_entry) only.
RETENTION_TABLES = ("journal_partition", "journal_retention")
READ_ONLY_JOURNAL_TABLES = CLAIM_TABLES + RETENTION_TABLES

# Apps whose every table must be listed in APP_COLUMNS.
LISTED_APPS = ("journal", "agentops")

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
            if table.split("_", 1)[0] in LISTED_APPS and table not in READ_ONLY_JOURNAL_TABLES:
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
            + ". List each journal column as `updatable` (a service changes it after INSERT) "
            "or `frozen`."
        )


def app_privileges_sql(
    connection: BaseDatabaseWrapper, *, app_role: str, tables: dict[str, list[str]]
) -> list[str]:
    """The statements that leave ``app_role`` with exactly the privileges listed here."""
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
    ]
    for table in sorted(tables):
        name = _quote(connection, table)
        statements.append(f"REVOKE ALL ON TABLE {name} FROM {role}")
        listed = APP_COLUMNS.get(table)
        if listed is not None:
            statements.append(f"GRANT SELECT, INSERT ON TABLE {name} TO {role}")
            if listed.updatable:
                columns = ", ".join(_quote(connection, c) for c in listed.updatable)
                statements.append(f"GRANT UPDATE ({columns}) ON TABLE {name} TO {role}")
        elif table in READ_ONLY_TABLES or table in READ_ONLY_JOURNAL_TABLES:
            statements.append(f"GRANT SELECT ON TABLE {name} TO {role}")
        else:
            statements.append(f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE {name} TO {role}")
    return statements


def app_privileges_sync(*, connection: BaseDatabaseWrapper, app_role: str) -> int:
    """Give ``app_role`` exactly the listed privileges on every table; run as the owner.

    Idempotent: it revokes everything first, then grants. Returns the number of tables.
    Raises :class:`PrivilegeListError` if a journal column is not listed.
    """
    tables = _table_columns(connection)
    _checked(tables)
    # One transaction: a running app never sees the moment between REVOKE and GRANT.
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        for statement in app_privileges_sql(connection, app_role=app_role, tables=tables):
            cursor.execute(statement)
    return len(tables)
