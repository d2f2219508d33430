"""While PostgreSQL has no primary, the pages and the API answer 503 with a sentence (issue 36).

No primary is played by a connection to a port nothing listens on: the same error libpq
gives while a failover is under way (every node refuses, or none takes writes).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connections
from django.test import Client

from agentops.unavailable import SENTENCE, database_unavailable
from devtools.process import free_port


@pytest.fixture
def no_primary(django_db_blocker: pytest.FixtureRequest, settings: object) -> Iterator[None]:
    connection = connections["default"]
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        connection.close()
        saved = dict(connection.settings_dict)
        connection.settings_dict.update(HOST="127.0.0.1", PORT=str(free_port()))
        try:
            yield
        finally:
            connection.close()
            connection.settings_dict.clear()
            connection.settings_dict.update(saved)


def client() -> Client:
    # Django's test client re-raises a view's error; a server answers it.
    return Client(raise_request_exception=False)


def _one_warning_each(caplog: pytest.LogCaptureFixture, answered: int) -> None:
    """Each 503 was told once, as a warning: no ERROR line, no traceback (an alarm for each
    request of a failover otherwise)."""
    loud = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert loud == [], [(r.name, r.getMessage()) for r in loud]
    told = [r for r in caplog.records if r.name == "agentops.unavailable"]
    assert len(told) == answered
    assert all(r.levelno == logging.WARNING and r.exc_info is None for r in told)
    assert all("answered 503" in r.getMessage() for r in told)


@pytest.mark.usefixtures("no_primary")
def test_the_api_answers_503_in_its_own_shape_with_retry_after(
    caplog: pytest.LogCaptureFixture,
) -> None:
    for method, path in (("get", "/api/v1/tasks"), ("post", "/api/v1/tasks")):
        response = getattr(client(), method)(
            path,
            HTTP_AUTHORIZATION="Bearer ao_live_whatever",
            content_type="application/json",
            data={} if method == "post" else None,
        )
        assert response.status_code == 503, (method, response.content[:500])
        assert response["Content-Type"] == "application/json"
        assert response["Retry-After"] == "10"
        body = json.loads(response.content)
        assert body["detail"] == SENTENCE
        assert "Traceback" not in response.content.decode()
    _one_warning_each(caplog, answered=2)


@pytest.mark.usefixtures("no_primary")
def test_a_page_answers_503_with_a_sentence_not_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    browser = client()
    # A session cookie: the login check reads the session before any view runs.
    browser.cookies["sessionid"] = "x" * 32
    for headers in ({}, {"HX-Request": "true"}):
        response = browser.get("/", headers=headers)
        assert response.status_code == 503, response.content[:500]
        assert response["Retry-After"] == "10"
        page = response.content.decode()
        assert SENTENCE in page
        assert "Traceback" not in page
    _one_warning_each(caplog, answered=2)


def test_only_a_lost_database_is_unavailable_not_a_statements_own_error() -> None:
    assert database_unavailable(psycopg.OperationalError("connection refused"))
    assert database_unavailable(psycopg.errors.AdminShutdown())
    assert database_unavailable(psycopg.errors.ReadOnlySqlTransaction())
    assert not database_unavailable(psycopg.errors.LockNotAvailable())
    assert not database_unavailable(psycopg.errors.UniqueViolation())
    assert not database_unavailable(ValueError("no"))
