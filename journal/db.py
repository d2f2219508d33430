"""The connection as the journal's hot path uses it: statements prepared on the server.

Django binds parameters on the client and sends each statement as new text. The two
statements every step makes (journal_record, journal_settle) go through a server-binding
cursor instead, which psycopg prepares after a few uses: parsed and planned once per
connection, then only executed. It is still Django's cursor wrapper around it, so whatever
watches the connection (query counts in tests, debug logging) sees these statements too.
"""

from __future__ import annotations

import psycopg
from django.db import connection
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper


def prepared_cursor() -> CursorWrapper:
    connection.ensure_connection()
    raw = psycopg.Cursor(connection.connection)
    wrapper = CursorDebugWrapper if connection.queries_logged else CursorWrapper
    return wrapper(raw, connection)
