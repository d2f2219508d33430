"""The two database roles as tests see them (agentops/dbroles.py, tests/conftest.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

import psycopg
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from agentops.dbroles import OWNER_ALIAS


def owner_connection() -> BaseDatabaseWrapper:
    """The connection of the role that owns the tables (the app's own, with one role)."""
    return connections[OWNER_ALIAS if OWNER_ALIAS in connections else DEFAULT_DB_ALIAS]


def as_owner(sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> list[Any]:
    """Run ``sql`` as the tables' owner, committed at once: what a test does to the journal
    that no app role may (the world moving on, time passing), never the app's own path."""
    try:
        with transaction.atomic(using=owner_connection().alias), owner_connection().cursor() as c:
            c.execute(sql, params)
            return c.fetchall() if c.description else []
    except DatabaseError as error:
        # PostgreSQL's own error (its SQLSTATE's class), as a client of the database sees it.
        if isinstance(error.__cause__, psycopg.Error):
            raise error.__cause__ from None
        raise


def transition(
    task_id: Any,
    to: str,
    *,
    code: str = "",
    reason: str = "",
    step_id: int | None = None,
    **data: Any,
) -> bool:
    """Move a task's status as ``journal_transition`` does (the state machine, finished means
    finished), as the owner: a test's way to put a task where it needs it, or to have
    someone else change it meanwhile. Returns whether it moved."""
    if to == "needs_human":
        code, reason = code or "parked", reason or "set aside by a test"
    rows = as_owner(
        "SELECT moved_from FROM journal_transition(p_task => %s::uuid, p_to => %s, "
        "p_from => ARRAY(SELECT status FROM journal_status), p_code => %s, p_reason => %s, "
        "p_wake_at => CASE WHEN %s = 'waiting' THEN now() + interval '1 hour' END, "
        "p_data => %s::jsonb, p_step => %s::bigint)",
        [task_id, to, code, reason, to, json.dumps(data), step_id],
    )
    return bool(rows and rows[0][0] is not None)


def flag(
    task_id: Any,
    code: str = "parked",
    reason: str = "set aside by a test",
    *,
    step_id: int | None = None,
) -> bool:
    """Hand a task to a person from outside its run (as a conflicting report would)."""
    return transition(task_id, "needs_human", code=code, reason=reason, step_id=step_id)


def lease_expire(task_id: Any) -> None:
    """Let the task's lease run out now (its holder died)."""
    as_owner("UPDATE journal_task SET lease_expires_at = now() WHERE id = %s", [task_id])


def role_params(kind: str) -> dict[str, Any]:
    """A psycopg connection's parameters for the database role of a kind of process ("web" or
    "worker": DATABASE_WEB_URL, DATABASE_WORKER_URL, which scripts/stack.py sets), on the
    database the tests use."""
    variable = f"DATABASE_{kind.upper()}_URL"
    url = os.environ.get(variable)
    assert url, f"{variable} is not set: run the tests as `make test` does (scripts/stack.py)"
    parts = urlsplit(url)
    return {
        "user": unquote(parts.username or ""),
        "password": unquote(parts.password or ""),
        "host": parts.hostname,
        "port": parts.port,
        "dbname": connections[DEFAULT_DB_ALIAS].settings_dict["NAME"],
    }
