"""The database as the processes we start must reach it."""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit

from django.db import connection

from agentops.database_url import database_url as url_of


def database_url(kind: str | None = None) -> str:
    """The database this process is connected to (a test run's test database too), as the
    DATABASE_URL of a worker, web server or runner we start against it: as this process's own
    role, or, given a ``kind`` of process ("web", "worker") whose role the launcher made
    (DATABASE_WEB_URL, DATABASE_WORKER_URL), as that one, as production would connect it."""
    s = connection.settings_dict
    user, password = s["USER"], s["PASSWORD"]
    own = os.environ.get(f"DATABASE_{kind.upper()}_URL", "") if kind else ""
    if own:
        parts = urlsplit(own)
        user, password = unquote(parts.username or ""), unquote(parts.password or "")
    return url_of(s, user=user, password=password)
