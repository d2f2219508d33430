"""The base of every sandbox provider: its routes, ledger, fault log and settings, the
``/_sandbox`` admin endpoints, and the pipeline that runs one request through faults,
idempotency and its handler.

Each provider subclasses :class:`Provider`, registers its routes, and runs it with
:func:`sandbox.server.serve`.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandbox.faults import LIES, Fault, FaultSet
from sandbox.idempotency import IdempotencyStore, request_fingerprint
from sandbox.wire import (
    JSON,
    ApiError,
    DropConnection,
    Handler,
    Request,
    Response,
    invalid,
    missing,
    new_id,
    refusal_body,
)

if TYPE_CHECKING:
    from sandbox.server import SandboxServer

# Settings whose values /_sandbox/config accepts but never returns.
SECRET_SETTINGS = frozenset({"webhook_secret"})

# A provider forgets what it made longer ago than this (``--retain-seconds``): its objects,
# its ledger, its fault log and its idempotency keys, so that its memory is bounded by what
# it is asked in that time and a demo can be left running for weeks. A week is longer than
# any key lives and than the provider audit's daily window looks back.
DEFAULT_RETAIN_SECONDS = 7 * 86400.0
# How often, at most, a request finds the provider pruning first (seconds; the setting
# prune_every_seconds).
PRUNE_EVERY_SECONDS = 5.0


@dataclass
class Route:
    method: str
    pattern: re.Pattern[str]
    handler: Handler
    operation: str | None  # None for admin routes: no faults, no idempotency


HOST_NAME = re.compile(r"[A-Za-z0-9.-]{1,253}")


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
        self.config: JSON = {
            "key_lifetime": key_lifetime,
            "retain_seconds": DEFAULT_RETAIN_SECONDS,
            "prune_every_seconds": PRUNE_EVERY_SECONDS,
            # Names a proxy in front of it may give it in the Host header, besides loopback's
            # (a relay on a bridge, as devtools/cluster's hosts reach it).
            "host_names": [],
        }
        self._pruned_at = time.monotonic()
        # Which run of the provider answers: a restart (a new process) has a new one, and has
        # forgotten every object the last one held. agentops' audit notices it by this.
        self.boot_id = new_id("boot_", 16)
        self.started_at = time.time()
        self.route("GET", "/_sandbox/health", self._health)
        self.route("GET", "/_sandbox/ledger", self._ledger)
        self.route("GET", "/_sandbox/faults", self._faults_list)
        self.route("GET", "/_sandbox/fault_log", self._fault_log)
        self.route("POST", "/_sandbox/faults", self._faults_add)
        self.route("DELETE", "/_sandbox/faults", self._faults_clear)
        self.route("GET", "/_sandbox/config", self._config_get)
        self.route("POST", "/_sandbox/config", self._config_set)
        self.route("POST", "/_sandbox/reset", self._reset)
        self.route("POST", "/_sandbox/forget", self._forget)

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
        if "host_names" in changes:
            names = changes["host_names"]
            if not isinstance(names, list) or not all(
                isinstance(n, str) and HOST_NAME.fullmatch(n) for n in names
            ):
                raise invalid("host_names must be a list of host names or addresses", "host_names")
            changes["host_names"] = [n.lower() for n in names]
        for name in ("retain_seconds", "prune_every_seconds"):
            if name in changes:
                seconds = float(changes[name])
                if seconds <= 0:
                    raise invalid(f"{name} must be positive", name)
                changes[name] = seconds
        self.config.update(changes)

    def reset_objects(self) -> None:
        """Subclasses clear their objects."""

    def prune_objects(self, before: float) -> None:
        """Subclasses drop the objects they made before ``before`` (Unix seconds); the caller
        holds the lock."""

    def prune(self, *, now: float | None = None) -> None:
        """Forget everything made more than ``retain_seconds`` ago: objects, ledger entries,
        faults logged and idempotency keys (a key past retention is a new request, even one
        whose lifetime has not run out)."""
        retain = float(self.config["retain_seconds"])
        before = (time.time() if now is None else now) - retain
        with self.lock:
            prune_listed_before(self.ledger, before)
            prune_listed_before(self.fault_log, before)
            self.prune_objects(before)
        self.idempotency.prune(older_than=retain)

    def _prune_due(self) -> None:
        now = time.monotonic()
        if now - self._pruned_at >= float(self.config["prune_every_seconds"]):
            self._pruned_at = now
            self.prune()

    def forget(self, object_id: str) -> bool:
        """Subclasses drop the object ``object_id`` from their records (its lists, its
        retrieve), as if it had never been made; whether there was one. The caller holds the
        lock."""
        return False

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
        retain = float(self.config["retain_seconds"])
        return {
            "ok": True,
            "provider": self.name,
            "boot_id": self.boot_id,
            "started_at": self.started_at,
            # What it may still show: nothing from before it started, nor older than this.
            "retain_seconds": retain,
            "retained_since": max(self.started_at, time.time() - retain),
            "held": self.held(),
        }

    def held(self) -> JSON:
        """How much it holds now (its memory's measure): subclasses add their objects."""
        with self.lock:
            return {
                "ledger": len(self.ledger),
                "fault_log": len(self.fault_log),
                "idempotency_keys": len(self.idempotency),
            }

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

    def _forget(self, request: Request) -> JSON:
        """``POST /_sandbox/forget {"id": ...}``: the provider no longer shows the object (its
        request stays in the ledger, which records what was asked)."""
        object_id = request.params.get("id")
        if not isinstance(object_id, str) or not object_id:
            raise invalid("id: the object to forget")
        with self.lock:
            if not self.forget(object_id):
                raise missing("object", object_id)
        return {"ok": True, "forgotten": object_id}

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
        self._prune_due()
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
                    421, refusal_body("misdirected_request", "This request is not for this server.")
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
                key, request_fingerprint(request.method, request.path, request.params)
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


def prune_listed_before(entries: list[JSON], before: float, field: str = "at") -> None:
    """Drop from ``entries`` (appended to in time order) those of ``field`` before
    ``before``."""
    cut = 0
    while cut < len(entries) and float(entries[cut][field]) < before:
        cut += 1
    del entries[:cut]


def prune_made_before(objects: dict[str, JSON], before: float) -> list[str]:
    """Drop from ``objects`` (kept in the order they were made) those ``created`` before
    ``before``; their ids."""
    gone = []
    for object_id, obj in objects.items():
        if float(obj["created"]) >= before:
            break
        gone.append(object_id)
    for object_id in gone:
        del objects[object_id]
    return gone


def created_window(params: JSON, items: list[JSON]) -> list[JSON]:
    """``created[gte]``, ``created[gt]``, ``created[lte]``, ``created[lt]`` (Unix seconds), or
    ``created=<s>`` exactly, as Stripe's lists take them."""
    created = params.get("created")
    if isinstance(created, dict):
        for op, raw in created.items():
            try:
                bound = float(raw)
            except (TypeError, ValueError) as exc:
                raise invalid(f"Invalid created filter: {raw!r}", f"created[{op}]") from exc
            cmp = {
                "gt": lambda c, b=bound: c > b,
                "gte": lambda c, b=bound: c >= b,
                "lt": lambda c, b=bound: c < b,
                "lte": lambda c, b=bound: c <= b,
            }.get(op)
            if cmp is None:
                raise invalid(f"Invalid created filter: {op}", f"created[{op}]")
            items = [o for o in items if cmp(o["created"])]
    elif created not in (None, ""):
        try:
            items = [o for o in items if int(o["created"]) == int(str(created))]
        except ValueError as exc:
            raise invalid(f"Invalid created filter: {created!r}", "created") from exc
    return items


def list_window(params: JSON, items: list[JSON], url: str) -> JSON:
    """A list of ``items`` (already in their order), filtered by ``created`` and, when the
    caller gives a ``limit``, a page of it after ``starting_after`` with ``has_more``."""
    items = created_window(params, items)
    raw_limit = params.get("limit")
    if raw_limit in (None, ""):
        return {"object": "list", "data": items, "has_more": False, "url": url}
    try:
        limit = int(str(raw_limit))
    except ValueError as exc:
        raise invalid("limit must be an integer", "limit") from exc
    if not 1 <= limit <= 100:
        raise invalid("limit must be between 1 and 100", "limit")
    after = params.get("starting_after")
    if after:
        ids = [o["id"] for o in items]
        if after not in ids:
            raise missing("object", str(after), "starting_after")
        items = items[ids.index(after) + 1 :]
    return {"object": "list", "data": items[:limit], "has_more": len(items) > limit, "url": url}


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
