"""The support desk's provider, as a stand-in: orders (seeded, read only), notes to the team's
channel, and store credits (issued by reference, listed by reference or ticket, voided).

Built on ``sandbox/``'s base classes, so it has what every sandbox has: idempotency keys
(``Idempotency-Key``: a replay gets the first answer, other arguments a 400), a ledger, the
``/_sandbox`` admin API and every injected fault. It stands for the world: it runs as a
process of its own and knows nothing of agentops.

Run: ``python -m examples.support.sandbox --port PORT [--key-lifetime S]``.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Iterable
from typing import Any

from sandbox.provider import Provider, prune_made_before
from sandbox.server import base_arg_parser, serve
from sandbox.wire import JSON, ApiError, Request, invalid, missing, new_id

# The orders the desk knows (its shop's, read only).
ORDERS: dict[str, JSON] = {
    "ORD-1001": {"customer": "ada@example.com", "total": 4900, "currency": "eur"},
    "ORD-1002": {"customer": "alan@example.com", "total": 12900, "currency": "usd"},
    "ORD-1003": {"customer": "grace@example.com", "total": 2500, "currency": "gbp"},
}
CURRENCIES = ("eur", "usd", "gbp")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def _text(params: JSON, name: str) -> str:
    value = params.get(name)
    if not isinstance(value, str) or not value:
        raise invalid(f"Missing required param: {name}.", name)
    return value


class Support(Provider):
    name = "support"

    def __init__(self, *, key_lifetime: float = 86400.0) -> None:
        super().__init__(key_lifetime=key_lifetime)
        # Tickets whose notes the desk refuses (a merged or locked ticket): 422 ticket_locked.
        self.config["locked_tickets"] = []
        self.orders = {oid: {"id": oid, "object": "order", **o} for oid, o in ORDERS.items()}
        self.notes: dict[str, JSON] = {}
        self.credits: dict[str, JSON] = {}
        self.route("GET", "/v1/orders/{id}", self.order_retrieve, "orders.retrieve")
        self.route("POST", "/v1/notes", self.note_create, "notes.create")
        self.route("GET", "/v1/notes", self.notes_list, "notes.list")
        self.route("POST", "/v1/credits", self.credit_create, "credits.create")
        self.route("GET", "/v1/credits", self.credits_list, "credits.list")
        self.route("GET", "/v1/credits/{id}", self.credit_retrieve, "credits.retrieve")
        self.route("POST", "/v1/credits/{id}/void", self.credit_void, "credits.void")

    def apply_config(self, changes: JSON) -> None:
        locked = changes.get("locked_tickets", [])
        if not isinstance(locked, list) or not all(isinstance(t, str) for t in locked):
            raise invalid("locked_tickets must be a list of tickets.", "locked_tickets")
        super().apply_config(changes)

    def reset_objects(self) -> None:
        self.notes.clear()
        self.credits.clear()

    def prune_objects(self, before: float) -> None:
        prune_made_before(self.notes, before)
        prune_made_before(self.credits, before)

    # -- orders

    def order_retrieve(self, request: Request) -> JSON:
        order = self.orders.get(request.route_params["id"])
        if order is None:
            raise missing("order", request.route_params["id"])
        return copy.deepcopy(order)

    # -- notes to the team's channel

    def note_create(self, request: Request) -> JSON:
        ticket, text = _text(request.params, "ticket"), _text(request.params, "text")
        if ticket in self.config["locked_tickets"]:
            raise ApiError(
                422, "invalid_request_error", f"{ticket} is locked.", code="ticket_locked"
            )
        note: JSON = {
            "id": new_id("note_"),
            "object": "note",
            "ticket": ticket,
            "text": text,
            "created": time.time(),
        }
        with self.lock:
            self.notes[note["id"]] = note
            self.record("notes.create", request, ticket, note["id"])
        return copy.deepcopy(note)

    def notes_list(self, request: Request) -> JSON:
        with self.lock:
            return _listed(self.notes.values(), ticket=request.params.get("ticket"))

    # -- store credits

    def credit_create(self, request: Request) -> JSON:
        p = request.params
        ticket, reference = _text(p, "ticket"), _text(p, "reference")
        customer, currency = _text(p, "customer"), _text(p, "currency")
        amount = p.get("amount")
        if not isinstance(amount, int) or isinstance(amount, bool) or amount < 1:
            raise invalid("amount must be a positive integer (minor units).", "amount")
        if currency not in CURRENCIES:
            raise invalid(f"currency must be one of {', '.join(CURRENCIES)}.", "currency")
        if not _EMAIL.match(customer):
            raise invalid(f"Invalid email address: {customer!r}.", "customer")
        order = _text(p, "order")
        if order not in self.orders:
            raise missing("order", order, "order")
        credit: JSON = {
            "id": new_id("cr_"),
            "object": "credit",
            "ticket": ticket,
            "order": order,
            "customer": customer,
            "amount": amount,
            "currency": currency,
            "reference": reference,
            "status": "issued",
            "created": time.time(),
            "voided_at": None,
        }
        with self.lock:
            self.credits[credit["id"]] = credit
            self.record("credits.create", request, reference, credit["id"])
        return copy.deepcopy(credit)

    def _credit(self, request: Request) -> JSON:
        credit = self.credits.get(request.route_params["id"])
        if credit is None:
            raise missing("credit", request.route_params["id"])
        return credit

    def credit_retrieve(self, request: Request) -> JSON:
        with self.lock:
            return copy.deepcopy(self._credit(request))

    def credit_void(self, request: Request) -> JSON:
        with self.lock:
            credit = self._credit(request)
            if credit["status"] == "issued":  # voiding a voided credit changes nothing
                credit["status"] = "voided"
                credit["voided_at"] = time.time()
                self.record("credits.void", request, credit["reference"], credit["id"])
            return copy.deepcopy(credit)

    def credits_list(self, request: Request) -> JSON:
        p = request.params
        with self.lock:
            return _listed(
                self.credits.values(), reference=p.get("reference"), ticket=p.get("ticket")
            )


def _listed(objects: Iterable[JSON], **wanted: Any) -> JSON:
    """``{"object": "list", "data": [...]}`` of the objects whose fields equal each wanted
    value that is given, oldest first (the caller holds the lock)."""
    data = [
        copy.deepcopy(o)
        for o in objects
        if all(value is None or o.get(name) == value for name, value in wanted.items())
    ]
    data.sort(key=lambda o: (o["created"], o["id"]))
    return {"object": "list", "data": data}


def main() -> None:
    args = base_arg_parser("python -m examples.support.sandbox").parse_args()
    serve(Support(key_lifetime=args.key_lifetime), args.port, retain_seconds=args.retain_seconds)


if __name__ == "__main__":
    main()
