"""What the web server and the HTTP API answer while PostgreSQL has no primary.

During a failover (docs/operating/many-machines.md) every statement fails until the standby
is promoted: the server cannot be reached, a session it ended breaks, or the only node that
answers is a standby. That is not the app's error and not the request's: the pages and the
API answer 503 with a sentence and ``Retry-After``, never a 500 and never a traceback. Nothing
the request asked for was done, or it was committed whole (each action is one transaction),
so trying again is safe; an API call with an ``Idempotency-Key`` is answered once either way.

Caught in two places, since a view's error and a middleware's reach Django by different
paths: a view's (the API's, through django-ninja's handler; a page's, through this
middleware's ``process_exception``), and whatever else, through :func:`server_error`, Django's
``handler500``, which it calls only with DEBUG off (with it on, a developer sees the
traceback).

Each 503 is one WARNING line, naming the request and the error's class: a failover is
expected, not a fault of the app's (Django's own ERROR line and traceback for a 5xx are not
written for it).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable

import psycopg
from django.conf import settings
from django.db import InterfaceError, InternalError, OperationalError
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.template.loader import render_to_string
from django.views.defaults import server_error as django_server_error

log = logging.getLogger(__name__)

SENTENCE = (
    "The database is not answering (a failover or a restart): nothing was done, or it was "
    "done whole. Try again in a few seconds."
)
# What PostgreSQL says when there is no primary to talk to: no connection (no SQLSTATE), a
# connection exception (08), the server shutting down or starting (57P01-57P03), a standby
# that refuses a write (25006), a session ended for sitting in a transaction (25P03).
_LOST_STATES = frozenset({"57P01", "57P02", "57P03", "25006", "25P03"})


def database_unavailable(exc: BaseException) -> bool:
    """Whether `exc` says the database cannot be reached or is not the primary (not a
    statement's own error: a constraint, a lock timeout, a query cancelled)."""
    if isinstance(exc, (InterfaceError, psycopg.InterfaceError)):
        return True
    if not isinstance(exc, (OperationalError, InternalError, psycopg.Error)):
        return False
    cause = exc if isinstance(exc, psycopg.Error) else exc.__cause__
    if not isinstance(cause, psycopg.Error):
        return isinstance(exc, OperationalError)
    if isinstance(cause, psycopg.InterfaceError):
        return True
    state = cause.sqlstate
    if state is None:
        return isinstance(cause, psycopg.OperationalError)
    return state.startswith("08") or state in _LOST_STATES


def _api(request: HttpRequest) -> bool:
    return request.path_info.startswith("/api/")


def unavailable_response(request: HttpRequest) -> HttpResponse:
    """503 with a sentence and ``Retry-After``: the API's JSON shape (``{"detail": ...}``)
    under /api/, a page elsewhere, rendered without the request (whose user and session would
    need the database)."""
    retry = int(settings.DATABASE_RETRY_AFTER_SECONDS)
    if _api(request):
        body = json.dumps({"detail": SENTENCE, "retry_after": retry})
        response = HttpResponse(body, status=503, content_type="application/json")
    else:
        page = render_to_string("503.html", {"sentence": SENTENCE, "retry_after": retry})
        response = HttpResponse(page, status=503)
    response["Retry-After"] = str(retry)
    response["Cache-Control"] = "no-store"
    # Told once, by :func:`_logged`'s warning: Django would log every 5xx again at ERROR (and
    # a middleware's with its traceback), an alarm for each request of a failover.
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response


def _logged(request: HttpRequest, exc: BaseException) -> None:
    log.warning(
        "the database is unavailable: %s %s answered 503 (%s)",
        request.method,
        request.path,
        type(exc).__name__,
    )


class DatabaseUnavailableMiddleware:
    """A view that lost its database answers 503 (see the module's docstring)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if not database_unavailable(exc):
            return None
        _logged(request, exc)
        return unavailable_response(request)


def api_exception(request: HttpRequest, exc: Exception) -> HttpResponse:
    """django-ninja's handler for database errors: 503 when the database is unavailable,
    else the error goes on as any other would."""
    if not database_unavailable(exc):
        raise exc
    _logged(request, exc)
    return unavailable_response(request)


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: an error the views did not meet (a middleware's: the session, the
    login check) that says the database is unavailable is a 503 too; any other is Django's
    500 page."""
    exc = sys.exc_info()[1]
    if exc is not None and database_unavailable(exc):
        _logged(request, exc)
        return unavailable_response(request)
    return django_server_error(request)
