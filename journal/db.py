"""The connection as the journal's hot path uses it: statements prepared on the server.

Django binds parameters on the client and sends each statement as new text, and it turns
psycopg's prepared statements off on its connections (``prepare_threshold=None``, for
connection poolers). The statements every step makes (journal_record, journal_settle,
journal_finish) go through :func:`prepared_cursor` instead: a server-binding cursor, on a
connection whose ``prepare_threshold`` is 0 (agentops/settings.py), so each statement is
prepared on first use: parsed and planned once per connection, then only executed
(``tests/journal/test_cost.py`` reads ``pg_prepared_statements`` to prove it). Whenever
something watches the connection (query counts in tests, execute wrappers, debug logging),
it is Django's cursor wrapper around it, so the watcher sees these statements too; otherwise
the cursor itself, with Django's errors (an IntegrityError is Django's, as from any cursor).

``JOURNAL_PREPARED_STATEMENTS = False`` turns it off, for a pooler in transaction mode that
cannot keep a session's prepared statements (PgBouncer before 1.21). Django's own cursors
bind on the client and never prepare, whatever the threshold.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections
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


def prepared_cursor(using: str = DEFAULT_DB_ALIAS) -> CursorWrapper | _Cursor:
    """A cursor for one statement: execute it, fetch what it returns, leave the block."""
    db = connections[using]  # once: every use of `connection` looks it up again
    db.ensure_connection()
    if db.queries_logged or db.execute_wrappers:
        wrapper = _PreparedDebugWrapper if db.queries_logged else CursorWrapper
        return wrapper(psycopg.Cursor(db.connection), db)
    return _Cursor(db)


class _Cursor:
    """The server-binding cursor itself, its errors Django's, when nothing watches the
    connection: what Django's wrapper adds around each statement beyond that (its list of
    execute wrappers, its log) is there only for watchers, and a step's statement is the
    runner's hottest call.

    Each statement's text has a psycopg cursor of its own, kept on the connection (and gone
    with it): psycopg makes a result's column loaders again whenever a cursor runs another
    text than it ran last, or is new; a kept one has them (a task's row and the entries'
    read in turn: 113 -> 85 us of CPU a statement here). Nothing the journal runs holds a result
    across another statement."""

    __slots__ = ("db", "raw")

    def __init__(self, db: Any) -> None:
        self.db = db
        self.raw: psycopg.Cursor[Any] | None = None

    def __enter__(self) -> _Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        pass  # the cursor stays with its connection, for its text's next call

    def execute(self, sql: str, params: Any = None) -> None:
        self.db.validate_no_broken_transaction()
        # As bytes, made once per statement's text: psycopg would encode the text again at
        # every call, and hash the new bytes to find what it made of it.
        query = _encoded.get(sql)
        if query is None:
            query = _encoded.setdefault(sql, sql.encode()) if len(_encoded) < 256 else sql.encode()
        conn = self.db.connection
        kept: dict[bytes, psycopg.Cursor[Any]] | None = vars(conn).get(_KEPT)
        if kept is None:
            kept = vars(conn)[_KEPT] = {}
        raw = kept.get(query)
        if raw is None:
            raw = psycopg.Cursor(conn)
            if len(kept) < 256:
                kept[query] = raw
        self.raw = raw
        with self.db.wrap_database_errors:
            raw.execute(query, params)

    def _ran(self) -> psycopg.Cursor[Any]:
        if self.raw is None:
            raise psycopg.ProgrammingError("no statement has been executed on this cursor")
        return self.raw

    def fetchone(self) -> Any:
        with self.db.wrap_database_errors:
            return self._ran().fetchone()

    def fetchall(self) -> list[Any]:
        with self.db.wrap_database_errors:
            return self._ran().fetchall()

    @property
    def description(self) -> Any:
        return self.raw.description if self.raw is not None else None


_encoded: dict[str, bytes] = {}
"""The journal's statements' texts as bytes (a few constants: never more than 256 kept)."""
_KEPT = "agentops_journal_cursors"
"""Where a connection keeps its statements' cursors (in its own attributes: they go with it)."""
