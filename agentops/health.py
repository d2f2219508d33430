"""``/healthz`` for load balancers: 200 when PostgreSQL and Redis answer, else 503.

A middleware, first in the chain, rather than a view: a load balancer probes each instance
by its address over plain HTTP, so the probe must pass before host validation and the HTTPS
redirect. It reveals only which dependency is unreachable, never why (errors are logged).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import django_rq
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse

log = logging.getLogger(__name__)

PATH = "/healthz"


def health_check() -> dict[str, str]:
    """Each dependency's state: ``ok`` or ``unreachable``."""
    status: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        status["database"] = "ok"
    except Exception:  # any failure means "not healthy", whatever its kind
        log.exception("health check: the database is unreachable")
        status["database"] = "unreachable"
    try:
        django_rq.get_connection("default").ping()
        status["redis"] = "ok"
    except Exception:  # idem
        log.exception("health check: Redis is unreachable")
        status["redis"] = "unreachable"
    return status


class HealthCheckMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path != PATH or request.method not in ("GET", "HEAD"):
            return self.get_response(request)
        status = health_check()
        healthy = all(state == "ok" for state in status.values())
        response = JsonResponse(status, status=200 if healthy else 503)
        response["Cache-Control"] = "no-store"
        return response
