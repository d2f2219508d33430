"""The two database roles as tests see them (agentops/dbroles.py, tests/conftest.py)."""

from __future__ import annotations

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from agentops.dbroles import OWNER_ALIAS


def owner_connection() -> BaseDatabaseWrapper:
    """The connection of the role that owns the tables (the app's own, with one role)."""
    return connections[OWNER_ALIAS if OWNER_ALIAS in connections else DEFAULT_DB_ALIAS]
