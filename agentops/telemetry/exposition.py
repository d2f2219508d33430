"""``/metrics`` in Prometheus's text format, for an allowed address or a client's token.

Answered by a middleware, second in the chain after ``/healthz``: Prometheus scrapes each
machine by its address over plain HTTP (multiprocess metrics are per machine), so the
request must pass before host validation and the HTTPS redirect — and is then checked here:

- ``Authorization: Bearer <token>`` of an API client whose token carries the scope
  ``metrics:read`` (``manage.py api_client create prometheus --scope metrics:read``): stored
  hashed, shown once, revoked without a restart, rate-limited like every API client
  (agentops/api/auth.py); a token without the scope is 403, a wrong one 401;
- or no token, from an address in ``METRICS_ALLOWED_ADDRESSES`` (loopback by default), as
  ``agentops.access.client_ip`` sees it (behind a declared proxy, the address the proxy
  saw, never the proxy's own). A DNS name in ``Host`` must then be one of
  ``DJANGO_ALLOWED_HOSTS``, so a web page cannot rebind its own name to 127.0.0.1 and read
  the metrics through a browser on this machine.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Iterator

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.http.request import split_domain_port, validate_host
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from agentops import shared_settings
from agentops.access import client_ip
from agentops.api.auth import TOKEN_PREFIX, api_client_authenticate, api_client_count
from agentops.models import ApiScope
from agentops.telemetry import instruments
from agentops.telemetry.collector import JournalCollector

log = logging.getLogger(__name__)

PATH = "/metrics"


class _Recorded(Collector):
    """The counters of this process alone (no PROMETHEUS_MULTIPROC_DIR: one process)."""

    def collect(self) -> Iterator[Metric]:
        yield from instruments.REGISTRY.collect()


def scrape_registry() -> CollectorRegistry:
    """What one scrape shows: every process's counters, and the gauges read now."""
    registry = CollectorRegistry(auto_describe=False)
    if shared_settings.metrics_dir():
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry.register(_Recorded())
    registry.register(JournalCollector())
    return registry


def allowed_address(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in settings.METRICS_ALLOWED_NETWORKS)


def _host_is_safe(request: HttpRequest) -> bool:
    """An address in Host (what a scraper sends), or a name this site answers to."""
    domain, _port = split_domain_port(request.META.get("HTTP_HOST", "") or "")
    if not domain:
        return False
    try:
        ipaddress.ip_address(domain.strip("[]"))
    except ValueError:
        return validate_host(domain, settings.ALLOWED_HOSTS)
    return True


def _refusal(request: HttpRequest) -> HttpResponse | None:
    """Why this request may not read the metrics (a response), or None when it may."""
    header = request.headers.get("Authorization", "")
    if header:
        scheme, _, token = header.partition(" ")
        client = (
            api_client_authenticate(token=token.strip())
            if scheme.lower() == "bearer" and token.strip().startswith(TOKEN_PREFIX)
            else None
        )
        if client is None:
            return _text(401, "this token is not a live API client's token", bearer=True)
        if ApiScope.METRICS_READ.value not in client.scopes:
            return _text(
                403,
                f"this client ({client.name}) may not read metrics: its token lacks the scope "
                f"{ApiScope.METRICS_READ.value}",
            )
        retry_after = api_client_count(client=client)
        if retry_after is not None:
            response = _text(429, f"rate limit: try again in {retry_after} s")
            response["Retry-After"] = str(retry_after)
            return response
        return None
    if allowed_address(client_ip(request)) and _host_is_safe(request):
        return None
    return _text(
        401,
        "metrics are served to METRICS_ALLOWED_ADDRESSES, or with a token of an API client "
        f"that has the scope {ApiScope.METRICS_READ.value}",
        bearer=True,
    )


def _text(status: int, message: str, *, bearer: bool = False) -> HttpResponse:
    response = HttpResponse(message + "\n", status=status, content_type="text/plain")
    if bearer:
        response["WWW-Authenticate"] = 'Bearer realm="agentops metrics"'
    response["Cache-Control"] = "no-store"
    return response


def metrics_response(request: HttpRequest) -> HttpResponse:
    refused = _refusal(request)
    if refused is not None:
        log.warning("metrics refused to %s: %s", client_ip(request), refused.status_code)
        return refused
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    # The process answering is a web server's, alive and running its version now.
    instruments.version_seen(instruments.WEB)
    response = HttpResponse(encoder(scrape_registry()), content_type=content_type)
    response["Cache-Control"] = "no-store"
    return response


class MetricsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path != PATH:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            response = _text(405, "GET only")
            response["Allow"] = "GET, HEAD"
            return response
        return metrics_response(request)
