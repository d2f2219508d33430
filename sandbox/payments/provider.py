"""The payments provider: its objects, its settings, its routes (the API's table), and
what every resource shares: authentication, ``expand``, and list pages.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable

from sandbox.payments.events import Webhooks, deliveries_list, event_retrieve, events_list
from sandbox.payments.intents import intent_create, intent_retrieve, intents_list, intents_search
from sandbox.payments.invoices import (
    invoice_retrieve,
    invoice_seed,
    invoices_list,
    invoices_search,
)
from sandbox.payments.params import int_param
from sandbox.payments.refunds import (
    charge_retrieve,
    refund_create,
    refund_from_dashboard,
    refund_retrieve,
    refunds_list,
)
from sandbox.provider import Provider, prune_listed_before, prune_made_before
from sandbox.wire import JSON, ApiError, Request, Response, invalid, missing

PaymentsHandler = Callable[["Payments", Request], Response | JSON]

# (method, path, handler, operation), matched in this order: a fixed path before the
# pattern that would also match it (``search`` before ``{id}``).
ROUTES: tuple[tuple[str, str, PaymentsHandler, str | None], ...] = (
    ("POST", "/v1/payment_intents", intent_create, "payment_intents.create"),
    ("GET", "/v1/payment_intents", intents_list, "payment_intents.list"),
    ("GET", "/v1/payment_intents/search", intents_search, "payment_intents.search"),
    ("GET", "/v1/payment_intents/{id}", intent_retrieve, "payment_intents.retrieve"),
    ("POST", "/v1/refunds", refund_create, "refunds.create"),
    ("GET", "/v1/refunds", refunds_list, "refunds.list"),
    ("GET", "/v1/refunds/{id}", refund_retrieve, "refunds.retrieve"),
    ("GET", "/v1/charges/{id}", charge_retrieve, "charges.retrieve"),
    ("GET", "/v1/events", events_list, "events.list"),
    ("GET", "/v1/events/{id}", event_retrieve, "events.retrieve"),
    ("GET", "/v1/invoices", invoices_list, "invoices.list"),
    ("GET", "/v1/invoices/search", invoices_search, "invoices.search"),
    ("GET", "/v1/invoices/{id}", invoice_retrieve, "invoices.retrieve"),
    ("GET", "/_sandbox/deliveries", deliveries_list, None),
    ("POST", "/_sandbox/invoices", invoice_seed, None),
    # A refund someone makes in the provider's dashboard: no key, no metadata of ours.
    ("POST", "/_sandbox/refunds", refund_from_dashboard, None),
)


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
        self.invoices: dict[str, JSON] = {}  # the system of record (invoices.py)
        self.order: dict[str, int] = {}  # creation sequence, for stable newest-first lists
        self.webhooks = Webhooks(self)
        for method, path, handler, operation in ROUTES:
            self.route(method, path, functools.partial(handler, self), operation)

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
            self.webhooks.rng.seed(changes["webhook_seed"])
        super().apply_config(changes)

    def reset_objects(self) -> None:
        self.intents.clear()
        self.created_at.clear()
        self.charges.clear()
        self.refunds.clear()
        self.events.clear()
        self.invoices.clear()
        self.order.clear()
        self.webhooks.clear()

    def prune_objects(self, before: float) -> None:
        """PaymentIntents and their charges, refunds, events and webhook deliveries made
        before ``before``; the invoices (the system of record, seeded) stay."""
        for pi_id in prune_made_before(self.intents, before):
            self.created_at.pop(pi_id, None)
            self.order.pop(pi_id, None)
        for object_id in prune_made_before(self.charges, before):
            self.order.pop(object_id, None)
        for object_id in prune_made_before(self.refunds, before):
            self.order.pop(object_id, None)
        cut = 0
        while cut < len(self.events) and float(self.events[cut]["created"]) < before:
            self.order.pop(self.events[cut]["id"], None)
            cut += 1
        del self.events[:cut]
        prune_listed_before(self.webhooks.deliveries, before)

    def held(self) -> JSON:
        return {
            **super().held(),
            "payment_intents": len(self.intents),
            "charges": len(self.charges),
            "refunds": len(self.refunds),
            "events": len(self.events),
            "deliveries": len(self.webhooks.deliveries),
            "invoices": len(self.invoices),
        }

    def forget(self, object_id: str) -> bool:
        """A PaymentIntent (with its charges), a refund or a charge, gone from the records."""
        intent = self.intents.pop(object_id, None)
        if intent is not None:
            self.created_at.pop(object_id, None)
            for charge in [c for c in self.charges.values() if c["payment_intent"] == object_id]:
                self.charges.pop(charge["id"], None)
            return True
        return (
            self.refunds.pop(object_id, None) is not None
            or self.charges.pop(object_id, None) is not None
        )

    def stop(self) -> None:
        self.webhooks.stop()

    def expand(self, request: Request, obj: JSON) -> JSON:
        out = copy.deepcopy(obj)
        expand = request.params.get("expand", [])
        if isinstance(expand, str):
            expand = [expand]
        if isinstance(expand, list):
            for path in expand:
                # A list's objects are expanded as ``data.<field>``, as Stripe's lists take it.
                field = str(path).removeprefix("data.")
                if field == "latest_charge" and out.get("latest_charge") in self.charges:
                    out["latest_charge"] = copy.deepcopy(self.charges[out["latest_charge"]])
                elif field == "payment_intent" and out.get("payment_intent") in self.intents:
                    out["payment_intent"] = copy.deepcopy(self.intents[out["payment_intent"]])
                elif field == "charge" and out.get("charge") in self.charges:
                    out["charge"] = copy.deepcopy(self.charges[out["charge"]])
        return out

    def list_page(self, request: Request, items: list[JSON], url: str) -> JSON:
        limit = int_param(request.params, "limit", required=False) or 10
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
                "data": [self.expand(request, o) for o in items],
                "has_more": False,
                "url": url,
            }
        return {
            "object": "list",
            "data": [self.expand(request, o) for o in items[:limit]],
            "has_more": len(items) > limit,
            "url": url,
        }
