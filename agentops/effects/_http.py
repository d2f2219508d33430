"""Honest HTTP: a provider's answer as what the call saw (docs/design.md §2).

A request that provably never left is ``NotSent``; anything after a byte may have left is
``Interrupted``; an answer is a ``Reply`` with its status, body and error code.

:func:`http_call` talks to providers through urllib3 directly: one pool per provider's
address and process, connections kept alive, nothing retried and no redirect followed (a
provider's 3xx is its answer). A provider's own library sends its requests the same way
(:func:`http_exchange`: the ``stripe`` library's transport, ``commerce.tools.payments``).
requests (:func:`http_session`, for an app's library that wants a session) costs twice as
much per call; its conveniences are kept here — the environment's proxy and CA-bundle
variables, read once per address — and its errors are still told apart.
"""

from __future__ import annotations

import json as jsonlib
import os
import ssl
import urllib.request
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import certifi
import requests
import urllib3
import urllib3.connectionpool
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    LocationValueError,
    NewConnectionError,
    ReadTimeoutError,
    URLSchemeUnknown,
)

from agentops import conf, shared_settings
from agentops.effects import _wire
from journal.outcomes import Interrupted, NotSent, Observation, Reply


def _causes(exc: BaseException) -> list[BaseException]:
    """The exception and everything it wraps: causes, contexts, and (as requests and urllib3
    do) exceptions passed as arguments or kept as ``reason``."""
    seen: list[BaseException] = []
    todo = [exc]
    while todo:
        link = todo.pop(0)
        if any(link is s for s in seen):
            continue
        seen.append(link)
        wrapped = [link.__cause__, link.__context__, getattr(link, "reason", None), *link.args]
        todo.extend(w for w in wrapped if isinstance(w, BaseException))
    return seen


def observe_exception(exc: BaseException) -> NotSent | Interrupted:
    """Classify a transport failure: did any byte of the request leave?

    Only a refused connection, an unresolved name, a connect timeout (no TCP connection, so
    no request) or a certificate that does not verify (the handshake stops before a byte of
    the request) proves the request was never sent. A reset, a read timeout or anything
    else may follow a request the provider received.
    """
    message = str(exc)[:500]
    for link in _causes(exc):
        # Our own client's (agentops.effects._wire), raised or wrapped (by a provider's
        # library: http_exchange's callers): it says itself which it was.
        if isinstance(link, _wire.NotSentError):
            return NotSent(link.name, message)
        if isinstance(link, _wire.ReadTimedOut):
            return Interrupted("ReadTimeout", message)
    for link in _causes(exc):
        if isinstance(
            link,
            requests.exceptions.MissingSchema
            | requests.exceptions.InvalidURL
            | LocationValueError
            | URLSchemeUnknown,
        ):
            # No address at all (an unset setting): nothing could have been sent.
            return NotSent("InvalidURL", message)
    for link in _causes(exc):
        if isinstance(
            link,
            requests.ConnectTimeout
            | ConnectTimeoutError
            | NewConnectionError
            | ConnectionRefusedError
            | ssl.SSLCertVerificationError,
        ):
            return NotSent(type(link).__name__, message)
    for link in _causes(exc):
        if isinstance(link, requests.ReadTimeout | ReadTimeoutError):
            # One name for a read timeout, whichever library saw it (the MCP answer reads it).
            return Interrupted("ReadTimeout", message)
        if isinstance(link, ConnectionResetError | TimeoutError):
            return Interrupted(type(link).__name__, message)
    return Interrupted(type(exc).__name__, message)


class _ProviderSession(requests.Session):
    """requests reads the environment (proxy variables, NO_PROXY, the CA bundle) again for
    every request, walking all of ``os.environ`` each time: a tenth of a step's CPU. Here it
    is read once per provider's address (scheme and host) and the request's own settings
    (its proxies, stream, CA bundle, certificate: the ``stripe`` library names its bundle in
    every request) in a process's life, with the same result; a process started with other
    variables reads them."""

    def __init__(self) -> None:
        super().__init__()
        self._environment: dict[Hashable, dict[str, Any]] = {}

    def merge_environment_settings(  # type: ignore[override]
        self, url: str, proxies: Any, stream: Any, verify: Any, cert: Any
    ) -> Any:
        parts = urlsplit(url)
        try:
            key = (
                parts.scheme,
                parts.netloc,
                tuple(sorted((proxies or {}).items())),
                stream,
                verify,
                cert,
            )
            found = self._environment.get(key)
        except TypeError:  # a setting that cannot be a key (not a string, a tuple, a bool)
            return super().merge_environment_settings(url, proxies, stream, verify, cert)
        if found is None:
            found = dict(super().merge_environment_settings(url, proxies, stream, verify, cert))
            self._environment[key] = found
        return {**found, "proxies": dict(found["proxies"])}


_sessions: dict[int, requests.Session] = {}


def http_session() -> requests.Session:
    """This process's HTTP session for providers: its connection pools and settings are
    made once, not per call (a provider that keeps connections alive keeps them)."""
    session = _sessions.get(os.getpid())
    if session is None:
        session = _sessions[os.getpid()] = _ProviderSession()
    return session


def http_call(
    method: str,
    url: str,
    *,
    key: str | None,
    timeout: float,
    json: Mapping[str, Any] | None = None,
    params: Mapping[str, Any] | None = None,
    api_key: str = "",
    key_header: str = "Idempotency-Key",
    content: bytes | None = None,
    headers: Mapping[str, str] | None = None,
) -> Observation:
    """One HTTP request to a JSON provider, reported as what it saw. ``key`` goes in
    ``key_header``; a JSON body that is not an object is kept under ``data``. ``content`` is
    sent as the body byte for byte (a signed body), with ``headers`` of its own."""
    headers = {"Accept": "application/json", "User-Agent": "agentops", **(headers or {})}
    if key is not None:
        headers[key_header] = key
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data: bytes | None = content
    if json is not None and content is None:
        data = jsonlib.dumps(json).encode()
        headers.setdefault("Content-Type", "application/json")
    if params:
        url += ("&" if "?" in url else "?") + urlencode(params, doseq=True)
    try:
        response = _send(method, url, data, headers, timeout)
    except (HTTPError, OSError, ValueError) as exc:
        return observe_exception(exc)
    try:
        body = jsonlib.loads(response.data) if response.data else {}
    except ValueError:
        body = {}
    body = body if isinstance(body, dict) else {"data": body}
    raw_error = body.get("error")
    error: dict[str, Any] = raw_error if isinstance(raw_error, dict) else {}
    return Reply(
        response.status,
        evidence=body if response.status < 400 else {},
        code=str(error.get("code") or error.get("type") or ""),
        message=str(error.get("message") or ""),
    )


@dataclass(frozen=True)
class Exchange:
    """A provider's raw answer: its status, headers (by any case of their names) and body."""

    status: int
    headers: Mapping[str, str]
    data: bytes


def http_exchange(
    method: str, url: str, *, body: bytes | None, headers: dict[str, str], timeout: float
) -> Exchange:
    """One request as :func:`http_call` makes it (the same connections, nothing retried, no
    redirect followed), its answer as it came, for a provider's own library to read: a
    transport it is given (``commerce.tools.payments.StripeTransport``). A failure is raised
    as the client saw it; :func:`observe_exception` tells from it, however wrapped, whether
    anything was sent."""
    response = _send(method, url, body, headers, timeout)
    return Exchange(
        response.status, requests.structures.CaseInsensitiveDict(response.headers), response.data
    )


def _send(
    method: str, url: str, body: bytes | None, headers: dict[str, str], timeout: float
) -> urllib3.BaseHTTPResponse | _wire.Response:
    """One request, nothing retried and no redirect followed, on the origin's own kept-alive
    connections when it is reached directly (agentops.effects._wire; the path alone is
    sent, as a browser would), through urllib3's manager when a proxy stands in between."""
    manager = _pool(url)
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if isinstance(manager, _wire.Origin):
        return _wire.request(manager, method, target, body=body, headers=headers, timeout=timeout)
    limits = _timeouts.get(timeout)
    if limits is None:
        limits = _timeouts[timeout] = urllib3.Timeout(connect=timeout, read=timeout)
    if isinstance(manager, urllib3.ProxyManager):
        return manager.request(
            method, url, body=body, headers=headers, timeout=limits, retries=False, redirect=False
        )
    origin = (os.getpid(), parts.scheme, parts.netloc)
    pool = _origins.get(origin)
    if pool is None:
        pool = _origins[origin] = manager.connection_from_url(url)
    return pool.urlopen(
        method,
        target,
        body=body,
        headers=headers,
        timeout=limits,
        retries=False,
        redirect=False,
        assert_same_host=False,
    )


_timeouts: dict[float, urllib3.Timeout] = {}
_origins: dict[tuple[int, str, str], urllib3.connectionpool.HTTPConnectionPool] = {}
_pools: dict[tuple[int, str, str], urllib3.PoolManager | _wire.Origin] = {}


# The CA bundle the environment names for verifying providers, as requests reads it.
shared_settings.TOOLS.setting(
    "REQUESTS_CA_BUNDLE",
    "path",
    "",
    "A file of CA certificates providers' certificates are verified against, as requests "
    "reads it; else `CURL_CA_BUNDLE`, else certifi's.",
    "empty (certifi's)",
)
shared_settings.TOOLS.setting(
    "CURL_CA_BUNDLE",
    "path",
    "",
    "Read as requests reads it, when `REQUESTS_CA_BUNDLE` is unset.",
    None,
)


def _ca_bundle() -> str:
    return conf.raw("REQUESTS_CA_BUNDLE") or conf.raw("CURL_CA_BUNDLE") or ""


def _pool(url: str) -> urllib3.PoolManager | _wire.Origin:
    """This process's connections to the provider at ``url``: through the proxy the
    environment names for it (HTTPS_PROXY, HTTP_PROXY, unless NO_PROXY lists the host) by
    urllib3, directly otherwise (agentops.effects._wire; urllib3 still, for an address with
    credentials in it or a scheme other than http and https); with the CA bundle the
    environment names (REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE) or certifi's, as requests would;
    read once per address."""
    parts = urlsplit(url)
    origin = (os.getpid(), parts.scheme, parts.netloc)
    pool = _pools.get(origin)
    if pool is None:
        ca = _ca_bundle()
        options: dict[str, Any] = {
            "maxsize": 10,
            "ca_certs": ca or certifi.where(),
        }
        host = parts.hostname or ""
        proxy = urllib.request.getproxies().get(parts.scheme)
        if proxy and host and not urllib.request.proxy_bypass(host):
            pool = urllib3.ProxyManager(proxy, **options)
        elif parts.scheme in ("http", "https") and host and "@" not in parts.netloc:
            try:
                port = parts.port
            except ValueError as exc:  # a port that is not one: nothing can be sent
                raise _wire.NotSentError("InvalidURL", f"{url}: {exc}") from exc
            pool = _wire.origin_for(parts.scheme, host, port, options["ca_certs"])
        else:
            pool = urllib3.PoolManager(**options)
        _pools[origin] = pool
    return pool
