"""Events (list, retrieve) and their webhooks: each event is POSTed, signed as Stripe signs
it, to the configured URL by a thread of its own, with the configured delay, duplication,
reordering, loss and retries; ``GET /_sandbox/deliveries`` lists every attempt.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import random
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandbox.provider import Provider
from sandbox.wire import JSON, Request, missing, new_id

if TYPE_CHECKING:
    from sandbox.payments.provider import Payments

API_VERSION = "2025-01-27.acacia"


def events_list(payments: Payments, request: Request) -> JSON:
    with payments.lock:
        items = list(payments.events)
        kind = request.params.get("type")
        if kind:
            items = [e for e in items if e["type"] == kind]
        return payments.list_page(request, items, "/v1/events")


def event_retrieve(payments: Payments, request: Request) -> JSON:
    ev_id = request.route_params["id"]
    with payments.lock:
        for event in payments.events:
            if event["id"] == ev_id:
                return copy.deepcopy(event)
    raise missing("event", ev_id)


def deliveries_list(payments: Payments, request: Request) -> JSON:
    with payments.lock:
        return {"data": copy.deepcopy(payments.webhooks.deliveries)}


def event_emit(payments: Payments, kind: str, obj: JSON, request: Request) -> None:
    """Create an event (caller holds the lock) and queue it for delivery."""
    event: JSON = {
        "id": new_id("evt_"),
        "object": "event",
        "api_version": API_VERSION,
        "created": int(time.time()),
        "data": {"object": copy.deepcopy(obj)},
        "livemode": False,
        "pending_webhooks": 1 if payments.config["webhook_url"] else 0,
        "request": {"id": request.request_id, "idempotency_key": request.idempotency_key},
        "type": kind,
    }
    payments.events.append(event)
    payments.order[event["id"]] = len(payments.order)
    if not payments.config["webhook_url"]:
        return
    payments.webhooks.queue(event, key=request.idempotency_key)


@dataclass
class _Pending:
    due: float
    event: JSON
    attempt: int


class Webhooks:
    """The delivery queue of one provider's events and the thread that sends them.

    It shares the provider's lock and reads the provider's settings (``webhook_*``) as each
    event is queued and sent, so ``POST /_sandbox/config`` applies to the next one.
    """

    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.deliveries: list[JSON] = []
        self.rng = random.Random()  # noqa: S311 - reproducible fault injection
        self._pending: list[_Pending] = []
        self._wake = threading.Condition(provider.lock)
        self._stopping = False
        self._worker = threading.Thread(target=self._deliver_loop, daemon=True)
        self._worker.start()

    def clear(self) -> None:
        """Forget every delivery and every event not yet sent (caller holds the lock)."""
        self.deliveries.clear()
        self._pending.clear()

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify_all()

    def queue(self, event: JSON, *, key: str | None) -> None:
        """Queue ``event``, sent for the request with idempotency ``key`` (caller holds the
        lock), applying the configured delay and duplication."""
        kind = event["type"]
        delay = float(self.provider.config["webhook_delay"])
        due = time.monotonic() + delay
        self._pending.append(_Pending(due, event, 1))
        if delay > 0:
            self.provider.note_fault("webhook_delay", kind, key=key, event=event["id"])
        if self.rng.random() < float(self.provider.config["webhook_duplicate"]):
            self._pending.append(_Pending(due, event, 1))
            self.provider.note_fault("webhook_duplicate", kind, key=key, event=event["id"])
        self._wake.notify_all()

    def sign(self, payload: str, timestamp: int | None = None) -> str:
        secret = str(self.provider.config["webhook_secret"] or "")
        t = int(time.time()) if timestamp is None else timestamp
        mac = hmac.new(secret.encode(), f"{t}.{payload}".encode(), hashlib.sha256).hexdigest()
        return f"t={t},v1={mac}"

    def _deliver_loop(self) -> None:
        while True:
            with self._wake:
                while True:
                    if self._stopping:
                        return
                    now = time.monotonic()
                    batch = [p for p in self._pending if p.due <= now]
                    if batch:
                        if self.provider.config["webhook_reorder"]:
                            # the whole pending queue goes out together, shuffled
                            batch = list(self._pending)
                        break
                    nxt = min((p.due for p in self._pending), default=None)
                    self._wake.wait(None if nxt is None else max(0.0, nxt - now))
                for item in batch:
                    self._pending.remove(item)
                if self.provider.config["webhook_reorder"] and len(batch) > 1:
                    self.rng.shuffle(batch)
                    self.provider.note_fault("webhook_reorder", "*", events=len(batch))
                url = self.provider.config["webhook_url"]
                loss = float(self.provider.config["webhook_loss"])
                lost = [self.rng.random() < loss for _ in batch]
            for item, is_lost in zip(batch, lost, strict=True):
                if is_lost and item.attempt == 1:
                    self._note_delivery(item, None, "lost")
                    key = (item.event.get("request") or {}).get("idempotency_key")
                    self.provider.note_fault("webhook_loss", item.event["type"], key=key)
                    continue
                self._deliver(item, url)

    def _deliver(self, item: _Pending, url: Any) -> None:
        payload = json.dumps(item.event, indent=2)
        status: int | None = None
        error: str | None = None
        if not isinstance(url, str) or not url:
            return
        req = urllib.request.Request(  # noqa: S310 - the configured webhook URL (http)
            url,
            data=payload.encode(),
            method="POST",
            headers={
                "Content-Type": "application/json; charset=utf-8",
                "User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
                "Stripe-Signature": self.sign(payload),
            },
        )
        try:
            with urllib.request.urlopen(  # noqa: S310
                req, timeout=float(self.provider.config["webhook_timeout"])
            ) as resp:
                status = resp.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        except (OSError, ValueError) as exc:
            error = repr(exc)
        self._note_delivery(item, status, error)
        ok = status is not None and 200 <= status < 300
        with self._wake:
            if not ok and item.attempt < int(self.provider.config["webhook_max_attempts"]):
                due = time.monotonic() + float(self.provider.config["webhook_retry_delay"])
                self._pending.append(_Pending(due, item.event, item.attempt + 1))
                self._wake.notify_all()

    def _note_delivery(self, item: _Pending, status: int | None, error: str | None) -> None:
        with self.provider.lock:
            self.deliveries.append(
                {
                    "event_id": item.event["id"],
                    "type": item.event["type"],
                    "attempt": item.attempt,
                    "status_code": status,
                    "error": error,
                    "at": time.time(),
                }
            )
