"""Idempotency keys as Stripe keeps them: the first request with a key runs, a concurrent
one gets 409, a later one with other parameters 400, and a later one with the same
parameters the saved reply (``Idempotent-Replayed: true``), until the key's lifetime
passes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sandbox.wire import JSON, Response

# Responses with these statuses are never saved for an idempotency key: the request did
# not start executing (validation, authentication, missing objects, conflicts, rate limits).
_NOT_SAVED = frozenset({400, 401, 403, 404, 409, 429})


def request_fingerprint(method: str, path: str, params: JSON) -> str:
    return json.dumps([method, path, params], sort_keys=True, default=str)


@dataclass
class _Saved:
    fingerprint: str
    created: float
    running: bool = True
    status: int = 0
    # The reply as JSON text: a fraction of the memory of the objects it decodes to, and a
    # copy by construction (each replay decodes its own).
    body: str = "{}"
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
            return Response(saved.status, json.loads(saved.body), headers)

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
            saved.body = json.dumps(response.body)
            saved.headers = dict(response.headers)
            saved.created = time.monotonic()

    def prune(self, *, older_than: float) -> int:
        """Forget every finished key saved more than ``older_than`` seconds ago, expired or
        not (the provider's retention: see ``Provider.prune``); how many."""
        cutoff = time.monotonic() - older_than
        with self._lock:
            old = [k for k, s in self._items.items() if not s.running and s.created < cutoff]
            for key in old:
                del self._items[key]
        return len(old)

    def __len__(self) -> int:
        return len(self._items)

    def abandon(self, key: str) -> None:
        with self._lock:
            self._items.pop(key, None)
