"""DATABASE_URL naming several hosts (a primary that fails over, issue 36)."""

from __future__ import annotations

import psycopg
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.db.backends.postgresql.base import DatabaseWrapper

from agentops.database_url import database_settings, database_url
from devtools.process import free_port


def test_one_host_parses_as_dj_database_url_does() -> None:
    s = database_settings("postgres://u:p@db.example:5433/app", conn_max_age=60)
    assert (s["HOST"], s["PORT"], s["NAME"], s["USER"], s["PASSWORD"]) == (
        "db.example",
        5433,
        "app",
        "u",
        "p",
    )


def test_a_list_of_hosts_becomes_lists_for_libpq_with_the_options_kept() -> None:
    s = database_settings(
        "postgres://u:p%40ss@a:5432,b:5433/app?target_session_attrs=read-write",
        conn_max_age=60,
    )
    assert (s["HOST"], s["PORT"], s["PASSWORD"]) == ("a,b", "5432,5433", "p@ss")
    assert s["OPTIONS"] == {"target_session_attrs": "read-write"}
    assert s["CONN_MAX_AGE"] == 60
    again = database_url(s, user="w", password="p@ss")
    assert again == "postgres://w:p%40ss@a:5432,b:5433/app?target_session_attrs=read-write"
    assert database_settings(again, conn_max_age=60)["HOST"] == "a,b"


def test_a_list_with_some_ports_missing_is_refused() -> None:
    with pytest.raises(ImproperlyConfigured):
        database_settings("postgres://u:p@a:5432,b/app", conn_max_age=0)


@pytest.mark.django_db
def test_django_connects_through_a_list_whose_first_host_is_dead() -> None:
    """libpq tries the dead port, then the live one that takes writes: Django's own
    connection parameters carry the list through."""
    s = connection.settings_dict
    url = database_url(dict(s), user=s["USER"], password=s["PASSWORD"])
    live = url.split("@", 1)[1].split("/", 1)[0]
    listed = url.replace(live, f"127.0.0.1:{free_port()},{live}", 1)
    listed += "&" if "?" in listed else "?"
    listed += "target_session_attrs=read-write"
    settings = database_settings(listed, conn_max_age=0)
    settings.update(NAME=s["NAME"], TIME_ZONE=None, AUTOCOMMIT=True, ATOMIC_REQUESTS=False)
    wrapper = DatabaseWrapper(settings, alias="listed")
    params = wrapper.get_connection_params()
    with psycopg.connect(**params) as conn:
        row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
    assert row == (False,)
