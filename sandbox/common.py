"""Shared machinery of the sandbox providers: HTTP server, routing, parsing,
idempotency, faults, ledger and the ``/_sandbox`` admin endpoints.

Standard library only. Each provider builds a :class:`Provider`, registers its routes and
runs it with :func:`serve`. Requests are handled concurrently (one thread per connection).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import secrets
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

JSON = dict[str, Any]

FAULTS = frozenset(
    {
        "latency_before_effect",
        "latency_after_effect",
        "drop_after_effect",
        "error_500_before",
        "error_500_after",
        "rate_limit",
        "conflict",
        "misdirected",
        "reset_before_read",
        "down",
        # The effect happens; the 200 that says so does not carry it (LIES).
        "empty_after_effect",
        "wrong_shape_after_effect",
        "html_after_effect",
    }
)

# A provider (or a proxy in front of it) that lies: the effect happens, and the reply is a
# 200 that does not carry it. Each is (body, content type).
LIES: dict[str, tuple[bytes, str]] = {
    "empty_after_effect": (b"", "application/json"),
    "wrong_shape_after_effect": (b'{"ok": true, "data": [1, 2, 3]}', "application/json"),
    "html_after_effect": (
        b"<!doctype html><html><head><title>OK</title></head><body><h1>OK</h1></body></html>",
        "text/html; charset=utf-8",
    ),
}

# Settings whose values /_sandbox/config accepts but never returns.
SECRET_SETTINGS = frozenset({"webhook_secret"})

# The names a client may use for a server bound to 127.0.0.1.
LOOPBACK_NAMES = ("127.0.0.1", "localhost")

# Responses with these statuses are never saved for an idempotency key: the request did
# not start executing (validation, authentication, missing objects, conflicts, rate limits).
_NOT_SAVED = frozenset({400, 401, 403, 404, 409, 429})


def new_id(prefix: str, n: int = 24) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return prefix + "".join(secrets.choice(alphabet) for _ in range(n))


class ApiError(Exception):
    """An error reply: raised by handlers, turned into ``{"error": {...}}``."""

    def __init__(
        self,
        status: int,
        type_: str,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.status = status
        err: JSON = {"type": type_, "message": message}
        if code is not None:
            err["code"] = code
        if param is not None:
            err["param"] = param
        err.update(extra)
        self.body: JSON = {"error": err}


def invalid(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, "invalid_request_error", message, param=param, code=code)


def missing(kind: str, object_id: str, param: str = "id") -> ApiError:
    return ApiError(
        404,
        "invalid_request_error",
        f"No such {kind}: '{object_id}'",
        code="resource_missing",
        param=param,
    )


@dataclass
class Request:
    method: str
    path: str
    query: JSON
    headers: dict[str, str]  # lower-cased names
    body: bytes
    params: JSON
    route_params: dict[str, str]
    request_id: str

    @property
    def idempotency_key(self) -> str | None:
        return self.headers.get("idempotency-key") or None


@dataclass
class Response:
    status: int
    body: JSON
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None
    """Sent instead of ``body`` as JSON (a lying reply: empty, or HTML)."""
    content_type: str = "application/json"


Handler = Callable[[Request], Response | JSON]


@dataclass
class Route:
    method: str
    pattern: re.Pattern[str]
    handler: Handler
    operation: str | None  # None for admin routes: no faults, no idempotency


# ---------------------------------------------------------------------------- parsing


def parse_form(pairs: list[tuple[str, str]]) -> JSON:
    """Decode Stripe-style nested form keys: ``a[b]=1``, ``a[]=x``, ``a[0][b]=y``."""
    out: JSON = {}
    for raw_key, value in pairs:
        m = re.match(r"^([^\[\]]+)((?:\[[^\[\]]*\])*)$", raw_key)
        if not m:
            out[raw_key] = value
            continue
        parts = [m.group(1), *re.findall(r"\[([^\[\]]*)\]", m.group(2))]
        node: Any = out
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            nxt = None if last else parts[i + 1]
            container: Any = [] if nxt == "" else {}
            if isinstance(node, list):
                if last:
                    node.append(value)
                elif part == "" or not node or not isinstance(node[-1], dict):
                    node.append(container)
                    node = node[-1]
                else:
                    node = node[-1]
            elif last:
                node[part] = value
            else:
                if not isinstance(node.get(part), (dict, list)):
                    node[part] = container
                node = node[part]
    return {k: v if k == "metadata" else _listify(v) for k, v in out.items()}


def _listify(value: Any) -> Any:
    """Turn ``{"0": a, "1": b}`` (from ``x[0]=a&x[1]=b``) into ``[a, b]``, recursively."""
    if isinstance(value, list):
        return [_listify(v) for v in value]
    if isinstance(value, dict):
        if value and all(k.isdigit() for k in value):
            return [_listify(value[k]) for k in sorted(value, key=int)]
        return {k: _listify(v) for k, v in value.items()}
    return value


def _fingerprint(method: str, path: str, params: JSON) -> str:
    return json.dumps([method, path, params], sort_keys=True, default=str)


# ---------------------------------------------------------------------------- idempotency


@dataclass
class _Saved:
    fingerprint: str
    created: float
    running: bool = True
    status: int = 0
    body: JSON = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


class IdempotencyStore:
    def __init__(self, lifetime: float, on_expired: Callable[[str], None] | None = None) -> None:
        self.lifetime = lifetime
        self._lock = threading.Lock()
        self._items: dict[str, _Saved] = {}
        # Told when a request comes with a key this store has forgotten (its lifetime passed):
        # a client that retries that late gets a new effect.
        self.on_expired = on_expired

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def begin(self, key: str, fingerprint: str) -> Response | None:
        """Claim ``key`` (None) or return the reply owed to this request instead."""
        now = time.monotonic()
        with self._lock:
            saved = self._items.get(key)
            if saved is not None and not saved.running and now - saved.created >= self.lifetime:
                del self._items[key]
                saved = None
                if self.on_expired is not None:
                    self.on_expired(key)
            if saved is None:
                self._items[key] = _Saved(fingerprint=fingerprint, created=now)
                return None
            if saved.running:
                return Response(
                    409,
                    {
                        "error": {
                            "type": "idempotency_error",
                            "code": "idempotency_key_in_use",
                            "message": "There is currently another in-progress request using "
                            "this Idempotent Key (that probably means you submitted twice, "
                            "and the other request is still going through): "
                            f"{key}. Please try again later.",
                        }
                    },
                )
            if saved.fingerprint != fingerprint:
                return Response(
                    400,
                    {
                        "error": {
                            "type": "idempotency_error",
                            "message": "Keys for idempotent requests can only be used with "
                            "the same parameters they were first used with. Try using a key "
                            "other than "
                            f"'{key}' if you meant to execute a different request.",
                        }
                    },
                )
            headers = dict(saved.headers)
            headers["Idempotent-Replayed"] = "true"
            if "Request-Id" in headers:
                headers["Original-Request"] = headers["Request-Id"]
            return Response(saved.status, json.loads(json.dumps(saved.body)), headers)

    def finish(self, key: str, response: Response) -> None:
        with self._lock:
            saved = self._items.get(key)
            if saved is None:
                return
            if response.status in _NOT_SAVED:
                del self._items[key]
                return
            saved.running = False
            saved.status = response.status
            saved.body = json.loads(json.dumps(response.body))
            saved.headers = dict(response.headers)
            saved.created = time.monotonic()

    def abandon(self, key: str) -> None:
        with self._lock:
            self._items.pop(key, None)


# ---------------------------------------------------------------------------- faults


@dataclass
class Fault:
    operation: str
    fault: str
    delay: float = 0.0
    times: int | None = 1
    probability: float = 1.0
    seed: int | None = None
    rng: random.Random = field(default_factory=random.Random, repr=False)

    def as_json(self) -> JSON:
        return {
            "operation": self.operation,
            "fault": self.fault,
            "delay": self.delay,
            "times": self.times,
            "probability": self.probability,
            "seed": self.seed,
        }


class FaultSet:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def add(self, spec: JSON) -> Fault:
        operation = spec.get("operation", "*")
        kind = spec.get("fault")
        if not isinstance(operation, str) or not operation:
            raise invalid("operation must be a non-empty string", "operation")
        if kind not in FAULTS:
            raise invalid(f"fault must be one of {sorted(FAULTS)}", "fault")
        try:
            delay = float(spec.get("delay", 0.0))
            times_raw = spec.get("times", 1)
            times = None if times_raw is None else int(times_raw)
            probability = float(spec.get("probability", 1.0))
            seed_raw = spec.get("seed")
            seed = None if seed_raw is None else int(seed_raw)
        except (TypeError, ValueError) as exc:
            raise invalid(f"bad fault option: {exc}") from exc
        fault = Fault(
            operation=operation,
            fault=str(kind),
            delay=delay,
            times=times,
            probability=probability,
            seed=seed,
            rng=random.Random(seed),  # noqa: S311 - reproducible fault injection, not crypto
        )
        if kind != "down":
            with self._lock:
                self._faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def list(self) -> list[JSON]:
        with self._lock:
            return [f.as_json() for f in self._faults]

    def take(self, operation: str) -> Fault | None:
        """The fault to apply to one request for ``operation``, if any (consumes a use)."""
        with self._lock:
            for fault in self._faults:
                if fault.operation not in ("*", operation) or fault.fault == "reset_before_read":
                    continue
                if self._fires(fault):
                    return fault
        return None

    def take_reset(self, operation: str) -> bool:
        """Consume a ``reset_before_read`` fault for ``operation``, if one fires now.

        Checked as soon as the request line and headers are parsed, before the body is read.
        """
        with self._lock:
            for fault in self._faults:
                if fault.operation in ("*", operation) and fault.fault == "reset_before_read":
                    return self._fires(fault)
        return False

    def _fires(self, fault: Fault) -> bool:
        """Roll the fault's seeded dice and count one use (caller holds the lock)."""
        if fault.probability < 1.0 and fault.rng.random() >= fault.probability:
            return False
        if fault.times is not None:
            fault.times -= 1
            if fault.times <= 0:
                self._faults.remove(fault)
        return True


# ---------------------------------------------------------------------------- provider


class DropConnection(Exception):
    """Close the connection without replying (``rst`` = abortive close)."""

    def __init__(self, rst: bool) -> None:
        super().__init__("drop")
        self.rst = rst


class Provider:
    """One simulated provider: its routes, objects (in subclasses), ledger and admin API."""

    name = "provider"

    def __init__(self, *, key_lifetime: float = 86400.0) -> None:
        self.lock = threading.RLock()
        self.routes: list[Route] = []
        self.ledger: list[JSON] = []
        # Every fault as it was applied to a request (or, for "down", posted), with the
        # request's idempotency key: what the chaos run counts and times recovery from.
        self.fault_log: list[JSON] = []
        self.idempotency = IdempotencyStore(
            key_lifetime,
            on_expired=lambda key: self.note_fault("key_expired", "*", key=key),
        )
        self.faults = FaultSet()
        self.server: SandboxServer | None = None
        self.config: JSON = {"key_lifetime": key_lifetime}
        self.route("GET", "/_sandbox/health", self._health)
        self.route("GET", "/_sandbox/ledger", self._ledger)
        self.route("GET", "/_sandbox/faults", self._faults_list)
        self.route("GET", "/_sandbox/fault_log", self._fault_log)
        self.route("POST", "/_sandbox/faults", self._faults_add)
        self.route("DELETE", "/_sandbox/faults", self._faults_clear)
        self.route("GET", "/_sandbox/config", self._config_get)
        self.route("POST", "/_sandbox/config", self._config_set)
        self.route("POST", "/_sandbox/reset", self._reset)

    # -- registration and hooks

    def route(self, method: str, path: str, handler: Handler, operation: str | None = None) -> None:
        regex = "^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", path) + "$"
        self.routes.append(Route(method, re.compile(regex), handler, operation))

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]] | None:
        path_found = False
        for r in self.routes:
            m = r.pattern.match(path)
            if m:
                path_found = True
                if r.method == method:
                    return r, m.groupdict()
        if path_found:
            raise ApiError(405, "invalid_request_error", f"Method {method} not allowed")
        return None

    def authenticate(self, request: Request) -> None:
        """Raise :class:`ApiError` 401 if the request is not authorised (payments)."""

    def apply_config(self, changes: JSON) -> None:
        """Subclasses validate and apply their own settings, then call super()."""
        if "key_lifetime" in changes:
            self.idempotency.lifetime = float(changes["key_lifetime"])
        self.config.update(changes)

    def reset_objects(self) -> None:
        """Subclasses clear their objects."""

    def record(
        self,
        operation: str,
        request: Request,
        reference: str | None,
        object_id: str,
        **extra: Any,
    ) -> None:
        entry: JSON = {
            "operation": operation,
            "key": request.idempotency_key,
            "reference": reference,
            "object_id": object_id,
            "params": request.params,
            "at": time.time(),
            "request_id": request.request_id,
        }
        entry.update(extra)
        with self.lock:
            self.ledger.append(entry)

    def note_fault(
        self, fault: str, operation: str, *, key: str | None = None, **extra: Any
    ) -> None:
        """Log a fault as it is applied (see ``fault_log``)."""
        entry: JSON = {"at": time.time(), "fault": fault, "operation": operation, "key": key}
        entry.update(extra)
        with self.lock:
            self.fault_log.append(entry)

    # -- admin endpoints

    def _health(self, request: Request) -> JSON:
        return {"ok": True, "provider": self.name}

    def _ledger(self, request: Request) -> JSON:
        key = request.query.get("key")
        reference = request.query.get("reference")
        operation = request.query.get("operation")
        with self.lock:
            rows = [
                e
                for e in self.ledger
                if (key is None or e["key"] == key)
                and (reference is None or e["reference"] == reference)
                and (operation is None or e["operation"] == operation)
            ]
        return {"data": rows}

    def _faults_list(self, request: Request) -> JSON:
        return {"data": self.faults.list()}

    def _fault_log(self, request: Request) -> JSON:
        with self.lock:
            return {"data": list(self.fault_log)}

    def _faults_add(self, request: Request) -> JSON:
        fault = self.faults.add(request.params)
        if fault.fault == "down":
            if self.server is None:
                raise invalid("server not running")
            self.server.go_down(fault.delay)
            self.note_fault("down", "*", delay=fault.delay)
        return {"fault": fault.as_json()}

    def _faults_clear(self, request: Request) -> JSON:
        self.faults.clear()
        return {"data": []}

    def _config_get(self, request: Request) -> JSON:
        # Secrets can be set here but are never read back: whoever can reach the sandbox
        # could otherwise forge what it signs.
        with self.lock:
            return {
                "config": {
                    k: (None if v is None else "(set)") if k in SECRET_SETTINGS else v
                    for k, v in self.config.items()
                }
            }

    def _config_set(self, request: Request) -> JSON:
        unknown = set(request.params) - set(self.config)
        if unknown:
            raise invalid(f"unknown settings: {sorted(unknown)}; known: {sorted(self.config)}")
        try:
            with self.lock:
                self.apply_config(request.params)
        except (TypeError, ValueError) as exc:
            raise invalid(f"bad setting: {exc}") from exc
        return self._config_get(request)

    def _reset(self, request: Request) -> JSON:
        with self.lock:
            self.reset_objects()
            self.ledger.clear()
            self.fault_log.clear()
        self.idempotency.clear()
        self.faults.clear()
        return {"ok": True}

    # -- request pipeline

    def handle(self, request: Request, route: Route) -> Response:
        """Run one request through faults, idempotency and the handler.

        Raises :class:`DropConnection` for faults that end without a reply.
        """
        fault: Fault | None = None
        if route.operation is not None:
            fault = self.faults.take(route.operation)
            if fault is not None:
                self.note_fault(fault.fault, route.operation, key=request.idempotency_key)
        try:
            if route.operation is not None:
                self.authenticate(request)
        except ApiError as exc:
            return Response(exc.status, exc.body)
        if fault is not None:
            if fault.fault == "error_500_before":
                return _api_error_500(request)
            if fault.fault == "rate_limit":
                return Response(
                    429,
                    {
                        "error": {
                            "type": "invalid_request_error",
                            "code": "rate_limit",
                            "message": "Too many requests hit the API too quickly.",
                        }
                    },
                )
            if fault.fault == "misdirected":
                # What a provider says to a request meant for another server (a wrong base
                # address behind a shared front end): it refuses us, not the action.
                return Response(
                    421, _refused("misdirected_request", "This request is not for this server.")
                )
            if fault.fault == "conflict":
                return Response(
                    409,
                    {
                        "error": {
                            "type": "invalid_request_error",
                            "code": "lock_timeout",
                            "message": "This object cannot be accessed right now because "
                            "another API request or Stripe process is currently accessing it.",
                        }
                    },
                )
        key = request.idempotency_key if request.method == "POST" else None
        if route.operation is None:
            key = None
        if key is not None:
            owed = self.idempotency.begin(
                key, _fingerprint(request.method, request.path, request.params)
            )
            if owed is not None:
                # A replay (or an idempotency refusal) performs no effect, but the network
                # faults still apply to its reply.
                owed.headers.setdefault("Idempotency-Key", key)
                return self._deliver_reply(owed, fault, before=True)
        try:
            if fault is not None and fault.fault == "latency_before_effect":
                time.sleep(fault.delay)
            try:
                result = route.handler(request)
                response = result if isinstance(result, Response) else Response(200, result)
            except ApiError as exc:
                response = Response(exc.status, exc.body)
            if key is not None:
                response.headers["Idempotency-Key"] = key
            response.headers.setdefault("Request-Id", request.request_id)
            if fault is not None and fault.fault == "error_500_after" and response.status < 300:
                response = _api_error_500(request)
                if key is not None:
                    response.headers["Idempotency-Key"] = key
            if key is not None:
                self.idempotency.finish(key, response)
                key = None
        finally:
            if key is not None:  # the handler crashed: nothing saved
                self.idempotency.abandon(key)
        return self._deliver_reply(response, fault, before=False)

    @staticmethod
    def _deliver_reply(response: Response, fault: Fault | None, *, before: bool) -> Response:
        if fault is not None and before and fault.fault == "latency_before_effect":
            time.sleep(fault.delay)
        if fault is not None and fault.fault == "latency_after_effect":
            time.sleep(fault.delay)
        if fault is not None and fault.fault == "drop_after_effect":
            raise DropConnection(rst=False)
        lie = LIES.get(fault.fault) if fault is not None else None
        if lie is not None and response.status < 300:
            raw, content_type = lie
            return Response(200, {}, dict(response.headers), raw=raw, content_type=content_type)
        return response


def _api_error_500(request: Request) -> Response:
    return Response(
        500,
        {
            "error": {
                "type": "api_error",
                "message": "An unknown error occurred (sandbox fault), request "
                f"{request.request_id}.",
            }
        },
        {"Request-Id": request.request_id},
    )


# ---------------------------------------------------------------------------- HTTP layer


class SandboxServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, port: int, provider: Provider) -> None:
        self.provider = provider
        self._serve_thread: threading.Thread | None = None
        self._state_lock = threading.Lock()
        self._closed = False
        self._down = False
        super().__init__(("127.0.0.1", port), _RequestHandler)
        provider.server = self

    def start(self) -> None:
        self._serve_thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._serve_thread.start()

    def stop(self) -> None:
        with self._state_lock:
            self._closed = True
            self.shutdown()
            self.server_close()

    def go_down(self, seconds: float) -> None:
        """Close the listening socket now; listen again on the same port after ``seconds``."""
        with self._state_lock:
            if self._down:
                raise invalid("the provider is already down")
            self._down = True
            self.shutdown()  # waits for serve_forever (running in its own thread) to return
            self.socket.close()
        timer = threading.Timer(seconds, self._come_back)
        timer.daemon = True
        timer.start()

    def _come_back(self) -> None:
        with self._state_lock:
            if self._closed:
                return
            host, port = self.server_address[0], self.server_address[1]
            self.socket = socket.socket(self.address_family, self.socket_type)
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            deadline = time.monotonic() + 5
            while True:
                try:
                    self.socket.bind((host, port))
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            self.server_activate()
            self._down = False
            self.start()


class _RequestHandler(BaseHTTPRequestHandler):
    server: SandboxServer
    protocol_version = "HTTP/1.0"  # one request per connection: "down" really refuses
    server_version = "sandbox"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._dispatch()

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch()

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch()

    def _dispatch(self) -> None:
        provider = self.server.provider
        request_id = new_id("req_", 14)
        split = urlsplit(self.path)
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            matched = provider.match(self.command, split.path)
        except ApiError as exc:
            self._send(Response(exc.status, exc.body, {"Request-Id": request_id}))
            return
        if matched is None:
            self._send(
                Response(
                    404,
                    {
                        "error": {
                            "type": "invalid_request_error",
                            "message": f"Unrecognized request URL ({self.command}: {split.path}).",
                        }
                    },
                    {"Request-Id": request_id},
                )
            )
            return
        route, route_params = matched
        refused = self._refusal(headers, admin=route.operation is None)
        if refused is not None:
            self._send(Response(refused[0], refused[1], {"Request-Id": request_id}))
            return
        # "reset before read": decided before the body is read, so the peer gets an RST with
        # its request unread.
        body = b""
        try:
            if route.operation is not None and provider.faults.take_reset(route.operation):
                key = headers.get("idempotency-key") or None
                provider.note_fault("reset_before_read", route.operation, key=key)
                self._abort(rst=True)
                return
            length = int(headers.get("content-length", "0") or 0)
            body = self.rfile.read(length) if length else b""
            query = parse_form(parse_qsl(split.query, keep_blank_values=True))
            params = self._parse_body(body, headers.get("content-type", ""))
        except ApiError as exc:
            self._send(Response(exc.status, exc.body, {"Request-Id": request_id}))
            return
        if self.command == "GET":
            params = query
        request = Request(
            method=self.command,
            path=split.path,
            query=query,
            headers=headers,
            body=body,
            params=params,
            route_params=route_params,
            request_id=request_id,
        )
        try:
            response = provider.handle(request, route)
        except DropConnection as drop:
            self._abort(rst=drop.rst)
            return
        except Exception as exc:  # noqa: BLE001 - a bug must still produce a reply
            response = Response(
                500,
                {"error": {"type": "api_error", "message": f"sandbox bug: {exc!r}"}},
            )
        response.headers.setdefault("Request-Id", request_id)
        self._send(response)

    def _refusal(self, headers: dict[str, str], *, admin: bool) -> tuple[int, JSON] | None:
        """Why a request must not reach the provider at all, as (status, body); or None.

        The sandbox listens on loopback, but a browser on this machine can still be made to
        talk to it: by a page on another site (a cross-origin form post), or through a name
        that an attacker's DNS points at 127.0.0.1 (rebinding). So the Host must name this
        server, and the admin endpoints, which change how the provider behaves, take only
        same-origin JSON: a cross-site form cannot send that, nor set the header.
        """
        port = self.server.server_address[1]
        own_hosts = {f"{name}:{port}" for name in LOOPBACK_NAMES} | set(LOOPBACK_NAMES)
        host = headers.get("host", "").lower()
        if host not in own_hosts:
            return 421, _refused("misdirected_request", f"Host {host!r} is not this server")
        if not admin or self.command == "GET":
            return None
        origin = headers.get("origin")
        if origin is not None and origin.lower() not in {f"http://{h}" for h in own_hosts}:
            return 403, _refused("cross_origin", f"requests from {origin!r} are not accepted")
        if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return 403, _refused("cross_origin", "cross-site requests are not accepted")
        if self.command == "POST" and not headers.get("content-type", "").startswith(
            "application/json"
        ):
            return 415, _refused("unsupported_media_type", "admin endpoints take JSON only")
        return None

    @staticmethod
    def _parse_body(body: bytes, content_type: str) -> JSON:
        if not body:
            return {}
        text = body.decode("utf-8", errors="replace")
        if "json" in content_type or text.lstrip().startswith("{"):
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise invalid(f"Invalid JSON body: {exc}") from exc
            if not isinstance(data, dict):
                raise invalid("The JSON body must be an object")
            return data
        return parse_form(parse_qsl(text, keep_blank_values=True))

    def _send(self, response: Response) -> None:
        payload = (
            response.raw
            if response.raw is not None
            else json.dumps(response.body, indent=2).encode()
        )
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Connection", "close")
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
        except OSError:
            pass  # the client went away (it timed out): the effect stands, the reply is lost

    def _abort(self, rst: bool) -> None:
        sock = self.connection
        with contextlib.suppress(OSError):
            if rst:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            else:
                sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()
        self.close_connection = True
        # Stop the stdlib from writing or flushing on the closed socket.
        self.wfile = _NullWriter()  # type: ignore[assignment]


def _refused(code: str, message: str) -> JSON:
    return {"error": {"type": "invalid_request_error", "code": code, "message": message}}


class _NullWriter:
    closed = False

    def write(self, data: bytes) -> int:
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------- CLI


def base_arg_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--key-lifetime", type=float, default=86400.0, help="idempotency key lifetime, s"
    )
    return parser


def serve(provider: Provider, port: int) -> None:
    """Listen on 127.0.0.1:port, print the ready line, run until SIGTERM/SIGINT."""
    server = SandboxServer(port, provider)
    stop = threading.Event()

    def _on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    server.start()
    print(f"ready on http://127.0.0.1:{server.server_address[1]}", flush=True)
    while not stop.wait(0.2):
        pass
    server.stop()
    provider_stop = getattr(provider, "stop", None)
    if callable(provider_stop):
        provider_stop()
    sys.stdout.flush()
