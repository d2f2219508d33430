"""A Stripe-compatible payments sandbox: the subset of the v1 REST API that the official
``stripe`` library uses for PaymentIntents, Refunds and webhooks.

Run: ``SANDBOX_WEBHOOK_SECRET=whsec_... python -m sandbox.payments --port PORT
[--key-lifetime S] [--search-lag S] [--webhook-url URL]``.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import os
import random
import re
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from sandbox.common import (
    JSON,
    ApiError,
    Provider,
    Request,
    Response,
    base_arg_parser,
    invalid,
    missing,
    new_id,
    serve,
)

API_VERSION = "2025-01-27.acacia"
REFERENCE_METADATA_KEY = "agentops_key"

# Stripe's test PaymentMethod ids: None = succeeds, else (code, decline_code, message).
TEST_METHODS: dict[str, tuple[str, str, str] | None] = {
    "pm_card_visa": None,
    "pm_card_visa_debit": None,
    "pm_card_mastercard": None,
    "pm_card_amex": None,
    "pm_card_chargeDeclined": ("card_declined", "generic_decline", "Your card was declined."),
    "pm_card_chargeDeclinedInsufficientFunds": (
        "card_declined",
        "insufficient_funds",
        "Your card has insufficient funds.",
    ),
    "pm_card_chargeDeclinedExpiredCard": (
        "expired_card",
        "expired_card",
        "Your card has expired.",
    ),
    "pm_card_chargeDeclinedIncorrectCvc": (
        "incorrect_cvc",
        "incorrect_cvc",
        "Your card's security code is incorrect.",
    ),
    "pm_card_chargeDeclinedProcessingError": (
        "processing_error",
        "processing_error",
        "An error occurred while processing your card. Try again in a little bit.",
    ),
}
_BRANDS = {"visa": "visa", "mastercard": "mastercard", "amex": "amex"}


def _brand(pm: str) -> str:
    for word, brand in _BRANDS.items():
        if word in pm:
            return brand
    return "visa"


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true")


def _int_param(params: JSON, name: str, *, required: bool) -> int | None:
    raw = params.get(name)
    if raw is None or raw == "":
        if required:
            raise invalid(f"Missing required param: {name}.", name, "parameter_missing")
        return None
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        raise invalid(f"Invalid integer: {raw}", name, "parameter_invalid_integer")
    try:
        if isinstance(raw, str) and not re.fullmatch(r"-?\d+", raw):
            raise ValueError(raw)
        return int(raw)
    except ValueError as exc:
        raise invalid(f"Invalid integer: {raw}", name, "parameter_invalid_integer") from exc


def _metadata(params: JSON) -> dict[str, str]:
    raw = params.get("metadata", {})
    if raw == "":
        return {}
    if not isinstance(raw, dict):
        raise invalid("Invalid object", "metadata")
    return {str(k): str(v) for k, v in raw.items()}


# The webhook signing secret comes from this environment variable (or POST /_sandbox/config).
WEBHOOK_SECRET_VARIABLE = "SANDBOX_WEBHOOK_SECRET"  # noqa: S105 - a name, not a secret


@dataclass
class _Pending:
    due: float
    event: JSON
    attempt: int


class Payments(Provider):
    name = "payments"

    def __init__(
        self,
        *,
        key_lifetime: float = 86400.0,
        search_lag: float = 0.0,
        webhook_url: str | None = None,
        webhook_secret: str | None = None,
    ) -> None:
        super().__init__(key_lifetime=key_lifetime)
        self.config.update(
            {
                "search_lag": search_lag,
                "webhook_url": webhook_url,
                "webhook_secret": webhook_secret,
                "webhook_delay": 0.0,
                "webhook_duplicate": 0.0,
                "webhook_reorder": False,
                "webhook_loss": 0.0,
                "webhook_retry_delay": 0.2,
                "webhook_max_attempts": 3,
                "webhook_timeout": 2.0,
                "webhook_seed": None,
            }
        )
        self.intents: dict[str, JSON] = {}
        self.created_at: dict[str, float] = {}  # monotonic creation time, for search lag
        self.charges: dict[str, JSON] = {}
        self.refunds: dict[str, JSON] = {}
        self.events: list[JSON] = []
        self.order: dict[str, int] = {}  # creation sequence, for stable newest-first lists
        self.deliveries: list[JSON] = []
        self._rng = random.Random()  # noqa: S311 - reproducible fault injection
        self._pending: list[_Pending] = []
        self._wake = threading.Condition(self.lock)
        self._stopping = False
        self._worker = threading.Thread(target=self._deliver_loop, daemon=True)
        self._worker.start()

        self.route("POST", "/v1/payment_intents", self.create_intent, "payment_intents.create")
        self.route("GET", "/v1/payment_intents", self.list_intents, "payment_intents.list")
        self.route(
            "GET", "/v1/payment_intents/search", self.search_intents, "payment_intents.search"
        )
        self.route(
            "GET", "/v1/payment_intents/{id}", self.retrieve_intent, "payment_intents.retrieve"
        )
        self.route("POST", "/v1/refunds", self.create_refund, "refunds.create")
        self.route("GET", "/v1/refunds", self.list_refunds, "refunds.list")
        self.route("GET", "/v1/refunds/{id}", self.retrieve_refund, "refunds.retrieve")
        self.route("GET", "/v1/charges/{id}", self.retrieve_charge, "charges.retrieve")
        self.route("GET", "/v1/events", self.list_events, "events.list")
        self.route("GET", "/v1/events/{id}", self.retrieve_event, "events.retrieve")
        self.route("GET", "/_sandbox/deliveries", self._deliveries)

    # ------------------------------------------------------------------ plumbing

    def authenticate(self, request: Request) -> None:
        auth = request.headers.get("authorization", "")
        m = re.fullmatch(r"Bearer ((?:sk|rk)_test_\S+)", auth)
        if not m:
            message = (
                "You did not provide an API key."
                if not auth
                else "Invalid API Key provided: " + auth.removeprefix("Bearer ")[:12] + "****"
            )
            raise ApiError(401, "authentication_error", message)

    def apply_config(self, changes: JSON) -> None:
        for name in ("search_lag", "webhook_delay", "webhook_duplicate", "webhook_loss"):
            if name in changes:
                changes[name] = float(changes[name])
        for name in ("webhook_retry_delay", "webhook_timeout"):
            if name in changes:
                changes[name] = float(changes[name])
        if "webhook_max_attempts" in changes:
            changes["webhook_max_attempts"] = int(changes["webhook_max_attempts"])
        if "webhook_reorder" in changes:
            changes["webhook_reorder"] = bool(changes["webhook_reorder"])
        if "webhook_seed" in changes:
            self._rng.seed(changes["webhook_seed"])
        super().apply_config(changes)

    def reset_objects(self) -> None:
        self.intents.clear()
        self.created_at.clear()
        self.charges.clear()
        self.refunds.clear()
        self.events.clear()
        self.order.clear()
        self.deliveries.clear()
        self._pending.clear()

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify_all()

    def _expand(self, request: Request, obj: JSON) -> JSON:
        out = copy.deepcopy(obj)
        expand = request.params.get("expand", [])
        if isinstance(expand, str):
            expand = [expand]
        if isinstance(expand, list):
            for field in expand:
                if field == "latest_charge" and out.get("latest_charge") in self.charges:
                    out["latest_charge"] = copy.deepcopy(self.charges[out["latest_charge"]])
                elif field == "payment_intent" and out.get("payment_intent") in self.intents:
                    out["payment_intent"] = copy.deepcopy(self.intents[out["payment_intent"]])
                elif field == "charge" and out.get("charge") in self.charges:
                    out["charge"] = copy.deepcopy(self.charges[out["charge"]])
        return out

    def _list(self, request: Request, items: list[JSON], url: str) -> JSON:
        limit = _int_param(request.params, "limit", required=False) or 10
        if not 1 <= limit <= 100:
            raise invalid("limit must be between 1 and 100", "limit")
        items = sorted(items, key=lambda o: self.order.get(o["id"], 0), reverse=True)
        created = request.params.get("created")
        if isinstance(created, dict):
            for op, raw in created.items():
                bound = int(raw)
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
            items = [o for o in items if o["created"] == int(created)]
        after = request.params.get("starting_after")
        if after:
            ids = [o["id"] for o in items]
            if after not in ids:
                raise missing("object", str(after), "starting_after")
            items = items[ids.index(after) + 1 :]
        before = request.params.get("ending_before")
        if before:
            ids = [o["id"] for o in items]
            if before not in ids:
                raise missing("object", str(before), "ending_before")
            items = items[: ids.index(before)]
            items = items[-limit:]
            return {
                "object": "list",
                "data": [self._expand(request, o) for o in items],
                "has_more": False,
                "url": url,
            }
        return {
            "object": "list",
            "data": [self._expand(request, o) for o in items[:limit]],
            "has_more": len(items) > limit,
            "url": url,
        }

    # ------------------------------------------------------------------ payment intents

    def create_intent(self, request: Request) -> Response | JSON:
        p = request.params
        amount = _int_param(p, "amount", required=True)
        if amount is None or amount < 1:
            raise invalid("This value must be greater than or equal to 1.", "amount")
        if amount > 99999999:
            raise invalid("Amount must be no more than $999,999.99", "amount", "amount_too_large")
        currency = p.get("currency")
        if not currency:
            raise invalid("Missing required param: currency.", "currency", "parameter_missing")
        if not isinstance(currency, str) or not re.fullmatch(r"[a-zA-Z]{3}", currency):
            raise invalid(f"Invalid currency: {currency}.", "currency")
        metadata = _metadata(p)
        pm = p.get("payment_method")
        if pm is not None and pm not in TEST_METHODS:
            raise invalid(f"No such PaymentMethod: '{pm}'", "payment_method", "resource_missing")
        confirm = _truthy(p.get("confirm"))
        if confirm and not pm:
            raise invalid(
                "You cannot confirm this PaymentIntent because it's missing a payment method.",
                "payment_method",
                "payment_intent_unexpected_state",
            )
        description = p.get("description")
        now = int(time.time())
        pi_id = new_id("pi_")
        pi: JSON = {
            "id": pi_id,
            "object": "payment_intent",
            "amount": amount,
            "amount_capturable": 0,
            "amount_received": 0,
            "application": None,
            "canceled_at": None,
            "cancellation_reason": None,
            "capture_method": "automatic",
            "client_secret": f"{pi_id}_secret_{new_id('', 20)}",
            "confirmation_method": "automatic",
            "created": now,
            "currency": currency.lower(),
            "customer": p.get("customer"),
            "description": description,
            "last_payment_error": None,
            "latest_charge": None,
            "livemode": False,
            "metadata": metadata,
            "next_action": None,
            "payment_method": pm,
            "payment_method_types": ["card"],
            "receipt_email": p.get("receipt_email"),
            "status": "requires_payment_method" if not pm else "requires_confirmation",
        }
        decline = TEST_METHODS.get(str(pm)) if pm else None
        charge: JSON | None = None
        if confirm:
            charge = {
                "id": new_id("ch_"),
                "object": "charge",
                "amount": amount,
                "amount_captured": 0 if decline else amount,
                "amount_refunded": 0,
                "captured": decline is None,
                "created": now,
                "currency": currency.lower(),
                "description": description,
                "failure_code": decline[0] if decline else None,
                "failure_message": decline[2] if decline else None,
                "livemode": False,
                "metadata": dict(metadata),
                "outcome": {
                    "network_status": "declined_by_network" if decline else "approved_by_network",
                    "reason": decline[1] if decline else None,
                    "type": "issuer_declined" if decline else "authorized",
                },
                "paid": decline is None,
                "payment_intent": pi_id,
                "payment_method": pm,
                "refunded": False,
                "status": "failed" if decline else "succeeded",
            }
            pi["latest_charge"] = charge["id"]
            if decline is None:
                pi["status"] = "succeeded"
                pi["amount_received"] = amount
            else:
                code, decline_code, message = decline
                pi["status"] = "requires_payment_method"
                pi["payment_method"] = None
                pi["last_payment_error"] = {
                    "type": "card_error",
                    "code": code,
                    "decline_code": decline_code,
                    "message": message,
                    "charge": charge["id"],
                    "payment_method": {
                        "id": pm,
                        "object": "payment_method",
                        "type": "card",
                        "card": {"brand": _brand(str(pm))},
                    },
                }
        with self.lock:
            self.intents[pi_id] = pi
            self.order[pi_id] = len(self.order)
            self.created_at[pi_id] = time.monotonic()
            if charge is not None:
                self.charges[charge["id"]] = charge
            self.record(
                "payment_intents.create",
                request,
                metadata.get(REFERENCE_METADATA_KEY),
                pi_id,
                status=pi["status"],
                amount=amount,
            )
            if confirm:
                kind = (
                    "payment_intent.succeeded"
                    if decline is None
                    else ("payment_intent.payment_failed")
                )
                self._emit(kind, pi, request)
            body = self._expand(request, pi)
        if decline is not None:
            code, decline_code, message = decline
            return Response(
                402,
                {
                    "error": {
                        "type": "card_error",
                        "code": code,
                        "decline_code": decline_code,
                        "message": message,
                        "param": None,
                        "charge": pi["latest_charge"],
                        "doc_url": f"https://stripe.com/docs/error-codes/{code}",
                        "payment_intent": body,
                        "request_log_url": f"https://dashboard.stripe.com/test/logs/{request.request_id}",
                    }
                },
            )
        return body

    def retrieve_intent(self, request: Request) -> JSON:
        pi_id = request.route_params["id"]
        with self.lock:
            pi = self.intents.get(pi_id)
            if pi is None:
                raise missing("payment_intent", pi_id)
            return self._expand(request, pi)

    def list_intents(self, request: Request) -> JSON:
        with self.lock:
            items = list(self.intents.values())
            customer = request.params.get("customer")
            if customer:
                items = [o for o in items if o.get("customer") == customer]
            return self._list(request, items, "/v1/payment_intents")

    def search_intents(self, request: Request) -> JSON:
        query = request.params.get("query")
        if not isinstance(query, str) or not query.strip():
            raise invalid("Missing required param: query.", "query", "parameter_missing")
        clauses = _parse_search(query)
        limit = _int_param(request.params, "limit", required=False) or 10
        lag = float(self.config["search_lag"])
        now = time.monotonic()
        with self.lock:
            matching = [pi for pi in self.intents.values() if all(c(pi) for c in clauses)]
            hits = [pi for pi in matching if now - self.created_at[pi["id"]] >= lag]
            for hidden in matching:
                if now - self.created_at[hidden["id"]] < lag:
                    key = hidden["metadata"].get(REFERENCE_METADATA_KEY)
                    self.note_fault("search_lag", "payment_intents.search", key=key)
            hits.sort(key=lambda o: self.order.get(o["id"], 0), reverse=True)
            page = request.params.get("page")
            start = int(page) if isinstance(page, str) and page.isdigit() else 0
            data = [self._expand(request, o) for o in hits[start : start + limit]]
            more = len(hits) > start + limit
        return {
            "object": "search_result",
            "data": data,
            "has_more": more,
            "next_page": str(start + limit) if more else None,
            "total_count": len(hits),
            "url": "/v1/payment_intents/search",
        }

    # ------------------------------------------------------------------ refunds & charges

    def create_refund(self, request: Request) -> JSON:
        p = request.params
        pi_id = p.get("payment_intent")
        charge_id = p.get("charge")
        metadata = _metadata(p)
        amount = _int_param(p, "amount", required=False)
        with self.lock:
            if not pi_id and charge_id:
                charge = self.charges.get(str(charge_id))
                if charge is None:
                    raise invalid(f"No such charge: '{charge_id}'", "charge", "resource_missing")
                pi_id = charge["payment_intent"]
            if not pi_id:
                raise invalid(
                    "One of the following params should be provided for this request: "
                    "payment_intent or charge.",
                    "payment_intent",
                    "parameter_missing",
                )
            pi = self.intents.get(str(pi_id))
            if pi is None:
                raise invalid(
                    f"No such payment_intent: '{pi_id}'", "payment_intent", "resource_missing"
                )
            if pi["status"] != "succeeded" or pi["latest_charge"] not in self.charges:
                raise invalid(
                    f"This PaymentIntent ({pi_id}) does not have a successful charge to refund.",
                    "payment_intent",
                    "charge_not_refundable",
                )
            charge = self.charges[pi["latest_charge"]]
            remaining = charge["amount"] - charge["amount_refunded"]
            if remaining <= 0:
                raise invalid(
                    f"Charge {charge['id']} has already been refunded.",
                    None,
                    "charge_already_refunded",
                )
            if amount is None:
                amount = remaining
            if amount < 1:
                raise invalid("This value must be greater than or equal to 1.", "amount")
            if amount > remaining:
                raise invalid(
                    f"Refund amount ({amount}) is greater than unrefunded amount on charge "
                    f"({remaining})",
                    "amount",
                    "amount_too_large",
                )
            refund: JSON = {
                "id": new_id("re_"),
                "object": "refund",
                "amount": amount,
                "charge": charge["id"],
                "created": int(time.time()),
                "currency": charge["currency"],
                "metadata": metadata,
                "payment_intent": pi["id"],
                "reason": p.get("reason"),
                "status": "succeeded",
            }
            self.refunds[refund["id"]] = refund
            self.order[refund["id"]] = len(self.order)
            charge["amount_refunded"] += amount
            charge["refunded"] = charge["amount_refunded"] >= charge["amount"]
            reference = metadata.get(REFERENCE_METADATA_KEY) or pi["metadata"].get(
                REFERENCE_METADATA_KEY
            )
            self.record(
                "refunds.create",
                request,
                reference,
                refund["id"],
                payment_intent=pi["id"],
                amount=amount,
            )
            self._emit("charge.refunded", charge, request)
            return self._expand(request, refund)

    def retrieve_refund(self, request: Request) -> JSON:
        re_id = request.route_params["id"]
        with self.lock:
            refund = self.refunds.get(re_id)
            if refund is None:
                raise missing("refund", re_id)
            return self._expand(request, refund)

    def list_refunds(self, request: Request) -> JSON:
        with self.lock:
            items = list(self.refunds.values())
            pi_id = request.params.get("payment_intent")
            if pi_id:
                items = [r for r in items if r["payment_intent"] == pi_id]
            charge_id = request.params.get("charge")
            if charge_id:
                items = [r for r in items if r["charge"] == charge_id]
            return self._list(request, items, "/v1/refunds")

    def retrieve_charge(self, request: Request) -> JSON:
        ch_id = request.route_params["id"]
        with self.lock:
            charge = self.charges.get(ch_id)
            if charge is None:
                raise missing("charge", ch_id)
            return self._expand(request, charge)

    # ------------------------------------------------------------------ events & webhooks

    def list_events(self, request: Request) -> JSON:
        with self.lock:
            items = list(self.events)
            kind = request.params.get("type")
            if kind:
                items = [e for e in items if e["type"] == kind]
            return self._list(request, items, "/v1/events")

    def retrieve_event(self, request: Request) -> JSON:
        ev_id = request.route_params["id"]
        with self.lock:
            for event in self.events:
                if event["id"] == ev_id:
                    return copy.deepcopy(event)
        raise missing("event", ev_id)

    def _deliveries(self, request: Request) -> JSON:
        with self.lock:
            return {"data": copy.deepcopy(self.deliveries)}

    def _emit(self, kind: str, obj: JSON, request: Request) -> None:
        """Create an event (caller holds the lock) and queue it for delivery."""
        event: JSON = {
            "id": new_id("evt_"),
            "object": "event",
            "api_version": API_VERSION,
            "created": int(time.time()),
            "data": {"object": copy.deepcopy(obj)},
            "livemode": False,
            "pending_webhooks": 1 if self.config["webhook_url"] else 0,
            "request": {"id": request.request_id, "idempotency_key": request.idempotency_key},
            "type": kind,
        }
        self.events.append(event)
        self.order[event["id"]] = len(self.order)
        if not self.config["webhook_url"]:
            return
        delay = float(self.config["webhook_delay"])
        due = time.monotonic() + delay
        self._pending.append(_Pending(due, event, 1))
        key = request.idempotency_key
        if delay > 0:
            self.note_fault("webhook_delay", kind, key=key, event=event["id"])
        if self._rng.random() < float(self.config["webhook_duplicate"]):
            self._pending.append(_Pending(due, event, 1))
            self.note_fault("webhook_duplicate", kind, key=key, event=event["id"])
        self._wake.notify_all()

    def sign(self, payload: str, timestamp: int | None = None) -> str:
        secret = str(self.config["webhook_secret"] or "")
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
                        if self.config["webhook_reorder"]:
                            # the whole pending queue goes out together, shuffled
                            batch = list(self._pending)
                        break
                    nxt = min((p.due for p in self._pending), default=None)
                    self._wake.wait(None if nxt is None else max(0.0, nxt - now))
                for item in batch:
                    self._pending.remove(item)
                if self.config["webhook_reorder"] and len(batch) > 1:
                    self._rng.shuffle(batch)
                    self.note_fault("webhook_reorder", "*", events=len(batch))
                url = self.config["webhook_url"]
                loss = float(self.config["webhook_loss"])
                lost = [self._rng.random() < loss for _ in batch]
            for item, is_lost in zip(batch, lost, strict=True):
                if is_lost and item.attempt == 1:
                    self._note_delivery(item, None, "lost")
                    key = (item.event.get("request") or {}).get("idempotency_key")
                    self.note_fault("webhook_loss", item.event["type"], key=key)
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
                req, timeout=float(self.config["webhook_timeout"])
            ) as resp:
                status = resp.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        except (OSError, ValueError) as exc:
            error = repr(exc)
        self._note_delivery(item, status, error)
        ok = status is not None and 200 <= status < 300
        with self._wake:
            if not ok and item.attempt < int(self.config["webhook_max_attempts"]):
                due = time.monotonic() + float(self.config["webhook_retry_delay"])
                self._pending.append(_Pending(due, item.event, item.attempt + 1))
                self._wake.notify_all()

    def _note_delivery(self, item: _Pending, status: int | None, error: str | None) -> None:
        with self.lock:
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


# ---------------------------------------------------------------------------- search


_CLAUSE = re.compile(
    r"""^\s*(?:metadata\[(?P<q>['"])(?P<mkey>.+?)(?P=q)\]|(?P<field>[a-z_]+))\s*(?P<op>:|>=|<=|>|<)\s*"""
    r"""(?:(?P<vq>['"])(?P<sval>.*?)(?P=vq)|(?P<nval>-?\d+))\s*$"""
)
_SEARCH_FIELDS = {"status", "currency", "amount", "customer", "created"}


def _parse_search(query: str) -> list[Any]:
    if re.search(r"\bOR\b", query):
        raise invalid("The sandbox supports only AND-joined search clauses.", "query")
    clauses: list[Any] = []
    for part in re.split(r"\s+AND\s+", query.strip()):
        m = _CLAUSE.match(part)
        if not m:
            raise invalid(f"Invalid search query: could not parse `{part}`.", "query")
        value = m.group("sval") if m.group("sval") is not None else m.group("nval")
        op = m.group("op")
        if m.group("mkey") is not None:
            if op != ":":
                raise invalid("metadata supports only ':' in search queries.", "query")
            key = m.group("mkey")
            clauses.append(lambda pi, k=key, v=value: pi["metadata"].get(k) == v)
            continue
        fld = m.group("field")
        if fld not in _SEARCH_FIELDS:
            raise invalid(f"Field `{fld}` is an unsupported search field.", "query")
        if op == ":":
            clauses.append(lambda pi, f=fld, v=value: str(pi.get(f)) == v)
        else:
            bound = int(value)
            cmps = {
                ">": lambda a, b: a > b,
                "<": lambda a, b: a < b,
                ">=": lambda a, b: a >= b,
                "<=": lambda a, b: a <= b,
            }
            clauses.append(lambda pi, f=fld, b=bound, c=cmps[op]: c(int(pi.get(f) or 0), b))
    return clauses


def main() -> None:
    parser = base_arg_parser("python -m sandbox.payments")
    parser.add_argument("--search-lag", type=float, default=0.0, help="search trails writes, s")
    parser.add_argument("--webhook-url", default=None)
    args = parser.parse_args()
    provider = Payments(
        key_lifetime=args.key_lifetime,
        search_lag=args.search_lag,
        webhook_url=args.webhook_url,
        # From the environment, never the command line (which every local user can read).
        webhook_secret=os.environ.get(WEBHOOK_SECRET_VARIABLE) or None,
    )
    serve(provider, args.port)


if __name__ == "__main__":
    main()
