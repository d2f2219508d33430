"""Invoices, the system of record an agent reads amounts and recipients from (as Stripe's
Invoices API holds them: ``number``, ``amount_due``, ``currency``, ``customer``,
``customer_email``, ``status``, ``lines``): seeded through ``POST /_sandbox/invoices``, read with
retrieve, list and search (``number:'INV-2291'``, no lag). Paying one does not change it: the
sandbox keeps no link between an invoice and a PaymentIntent.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

from sandbox.payments.params import int_param
from sandbox.wire import JSON, Request, invalid, missing, new_id

if TYPE_CHECKING:
    from sandbox.payments.provider import Payments

STATUSES = ("draft", "open", "paid", "uncollectible", "void")
_NUMBER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,63}$")
_SEARCH = re.compile(r"^\s*(number|customer|customer_email|status)\s*:\s*'([^']*)'\s*$")


def invoice_seed(payments: Payments, request: Request) -> JSON:
    """``POST /_sandbox/invoices``: put an invoice in the record (tests)."""
    return invoice_add(payments, request.params)


def invoice_add(payments: Payments, p: JSON) -> JSON:
    """Put an invoice in the record: through the admin API, or ``--invoice`` at start-up
    (``make run``'s seed)."""
    number = p.get("number")
    if not isinstance(number, str) or not _NUMBER.match(number):
        raise invalid("number: 1 to 64 letters, digits, '.', '_', '/' or '-'", "number")
    amount = int_param(p, "amount_due", required=True)
    if amount is None or amount < 1:
        raise invalid("amount_due must be a positive integer (minor units)", "amount_due")
    currency = p.get("currency", "usd")
    if not isinstance(currency, str) or not re.fullmatch(r"[a-z]{3}", currency):
        raise invalid(f"Invalid currency: {currency}.", "currency")
    status = p.get("status", "open")
    if status not in STATUSES:
        raise invalid(f"status must be one of {', '.join(STATUSES)}", "status")
    in_id = new_id("in_")
    invoice: JSON = {
        "id": in_id,
        "object": "invoice",
        "number": number,
        "amount_due": amount,
        "currency": currency,
        "customer": p.get("customer"),
        "customer_email": p.get("customer_email"),
        "status": status,
        "created": int(time.time()),
        "lines": _lines(p.get("lines"), in_id),
    }
    with payments.lock:
        if any(i["number"] == number for i in payments.invoices.values()):
            raise invalid(f"an invoice numbered {number} exists already", "number")
        payments.invoices[invoice["id"]] = invoice
        payments.order[invoice["id"]] = len(payments.order)
    return invoice


def _lines(given: object, in_id: str) -> JSON:
    """The invoice's line items as Stripe lists them (``{"object": "list", "data": […]}``):
    seeded as a list of line items, or already as Stripe's list; none when not given."""
    if isinstance(given, dict):
        given = given.get("data")
    items = [dict(i) for i in given or [] if isinstance(i, dict)] if isinstance(given, list) else []
    for item in items:
        item.setdefault("id", new_id("il_"))
        item.setdefault("object", "line_item")
    return {
        "object": "list",
        "data": items,
        "has_more": False,
        "total_count": len(items),
        "url": f"/v1/invoices/{in_id}/lines",
    }


def invoice_retrieve(payments: Payments, request: Request) -> JSON:
    in_id = request.route_params["id"]
    with payments.lock:
        invoice = payments.invoices.get(in_id)
        if invoice is None:
            raise missing("invoice", in_id)
        return dict(invoice)


def invoices_list(payments: Payments, request: Request) -> JSON:
    with payments.lock:
        items = list(payments.invoices.values())
        for field in ("customer", "status"):
            wanted = request.params.get(field)
            if wanted:
                items = [i for i in items if i.get(field) == wanted]
        return payments.list_page(request, items, "/v1/invoices")


def invoices_search(payments: Payments, request: Request) -> JSON:
    """Stripe's search, for the fields an invoice is looked up by, joined by AND."""
    query = request.params.get("query")
    if not isinstance(query, str) or not query.strip():
        raise invalid("Missing required param: query.", "query", "parameter_missing")
    clauses = []
    for part in re.split(r"\s+AND\s+", query.strip()):
        m = _SEARCH.match(part)
        if not m:
            raise invalid(f"Invalid search query: could not parse `{part}`.", "query")
        clauses.append((m.group(1), m.group(2)))
    limit = int_param(request.params, "limit", required=False) or 10
    with payments.lock:
        hits = [
            dict(i)
            for i in payments.invoices.values()
            if all(str(i.get(f)) == v for f, v in clauses)
        ]
    hits.sort(key=lambda i: payments.order.get(i["id"], 0), reverse=True)
    return {
        "object": "search_result",
        "data": hits[:limit],
        "has_more": len(hits) > limit,
        "next_page": None,
        "total_count": len(hits),
        "url": "/v1/invoices/search",
    }
