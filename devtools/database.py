"""The database as the processes we start must reach it."""

from __future__ import annotations

from django.db import connection


def database_url() -> str:
    """The database this process is connected to (a test run's test database too), as the
    DATABASE_URL of a worker, web server or runner we start against it."""
    s = connection.settings_dict
    password = f":{s['PASSWORD']}" if s["PASSWORD"] else ""
    return f"postgres://{s['USER']}{password}@{s['HOST']}:{s['PORT']}/{s['NAME']}"
