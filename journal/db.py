"""The connection as the journal's hot path uses it: statements prepared on the server.

Django binds parameters on the client and sends each statement as new text, and it turns
psycopg's prepared statements off on its connections (``prepare_threshold=None``, for
connection poolers). The statements every step makes (journal_record, journal_settle,
journal_finish) go through :func:`prepared_cursor` instead: a server-binding cursor, on a
connection whose ``prepare_threshold`` is 0 (agentops/settings.py), so each statement is
prepared on first use: parsed and planned once per connection, then only executed
(``tests/journal/test_cost.py`` reads ``pg_prepared_statements`` to prove it). It is still
Django's cursor wrapper around it, so whatever watches the connection (query counts in
tests, debug logging) sees these statements too.

``JOURNAL_PREPARED_STATEMENTS = False`` turns it off, for a pooler in transaction mode that
cannot keep a session's prepared statements (PgBouncer before 1.21). Django's own cursors
bind on the client and never prepare, whatever the threshold.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import connection
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper


class _PreparedDebugWrapper(CursorDebugWrapper):
    """Logs a prepared statement's text as written (psycopg keeps no text of its own for a
    statement it executes by name, so Django's usual rendering of it would log None)."""

    @contextmanager
    def debug_sql(
        self,
        sql: str | None = None,
        params: Any = None,
        use_last_executed_query: bool = False,
        many: bool = False,
    ) -> Iterator[None]:
        with super().debug_sql(sql, params, use_last_executed_query=False, many=many):
            yield


def prepared_cursor() -> CursorWrapper:
    connection.ensure_connection()
    raw = psycopg.Cursor(connection.connection)
    wrapper = _PreparedDebugWrapper if connection.queries_logged else CursorWrapper
    return wrapper(raw, connection)
