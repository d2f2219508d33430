"""PaymentIntents: create (confirmed at once with one of Stripe's test payment methods,
which succeed or decline), retrieve, list, and search, which trails writes by the
``search_lag`` setting as Stripe's does.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

from sandbox.payments.events import event_emit
from sandbox.payments.params import REFERENCE_METADATA_KEY, int_param, metadata_param
from sandbox.wire import JSON, Request, Response, invalid, missing, new_id

if TYPE_CHECKING:
    from sandbox.payments.provider import Payments

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
# The card behind each test PaymentMethod, as Stripe documents its test cards: (brand, last4).
TEST_CARDS: dict[str, tuple[str, str]] = {
    "pm_card_visa": ("visa", "4242"),
    "pm_card_visa_debit": ("visa", "5556"),
    "pm_card_mastercard": ("mastercard", "4444"),
    "pm_card_amex": ("amex", "8431"),
    "pm_card_chargeDeclined": ("visa", "0002"),
    "pm_card_chargeDeclinedInsufficientFunds": ("visa", "9995"),
    "pm_card_chargeDeclinedExpiredCard": ("visa", "0069"),
    "pm_card_chargeDeclinedIncorrectCvc": ("visa", "0127"),
    "pm_card_chargeDeclinedProcessingError": ("visa", "0119"),
}


def card_details(pm: str) -> JSON:
    """A charge's ``payment_method_details`` for a test PaymentMethod, as Stripe gives them:
    the card's brand and last four digits (never its number)."""
    brand, last4 = TEST_CARDS.get(pm, ("visa", "4242"))
    return {"type": "card", "card": {"brand": brand, "last4": last4}}


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true")


def intent_create(payments: Payments, request: Request) -> Response | JSON:
    p = request.params
    amount = int_param(p, "amount", required=True)
    if amount is None or amount < 1:
        raise invalid("This value must be greater than or equal to 1.", "amount")
    if amount > 99999999:
        raise invalid("Amount must be no more than $999,999.99", "amount", "amount_too_large")
    currency = p.get("currency")
    if not currency:
        raise invalid("Missing required param: currency.", "currency", "parameter_missing")
    if not isinstance(currency, str) or not re.fullmatch(r"[a-zA-Z]{3}", currency):
        raise invalid(f"Invalid currency: {currency}.", "currency")
    metadata = metadata_param(p)
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
            "payment_method_details": card_details(str(pm)),
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
                    "card": card_details(str(pm))["card"],
                },
            }
    with payments.lock:
        payments.intents[pi_id] = pi
        payments.order[pi_id] = len(payments.order)
        payments.created_at[pi_id] = time.monotonic()
        if charge is not None:
            payments.charges[charge["id"]] = charge
        payments.record(
            "payment_intents.create",
            request,
            metadata.get(REFERENCE_METADATA_KEY),
            pi_id,
            status=pi["status"],
            amount=amount,
        )
        if confirm:
            kind = (
                "payment_intent.succeeded" if decline is None else ("payment_intent.payment_failed")
            )
            event_emit(payments, kind, pi, request)
        body = payments.expand(request, pi)
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


def intent_retrieve(payments: Payments, request: Request) -> JSON:
    pi_id = request.route_params["id"]
    with payments.lock:
        pi = payments.intents.get(pi_id)
        if pi is None:
            raise missing("payment_intent", pi_id)
        return payments.expand(request, pi)


def intents_list(payments: Payments, request: Request) -> JSON:
    with payments.lock:
        items = list(payments.intents.values())
        customer = request.params.get("customer")
        if customer:
            items = [o for o in items if o.get("customer") == customer]
        return payments.list_page(request, items, "/v1/payment_intents")


def intents_search(payments: Payments, request: Request) -> JSON:
    query = request.params.get("query")
    if not isinstance(query, str) or not query.strip():
        raise invalid("Missing required param: query.", "query", "parameter_missing")
    clauses = _parse_search(query)
    limit = int_param(request.params, "limit", required=False) or 10
    lag = float(payments.config["search_lag"])
    now = time.monotonic()
    with payments.lock:
        matching = [pi for pi in payments.intents.values() if all(c(pi) for c in clauses)]
        hits = [pi for pi in matching if now - payments.created_at[pi["id"]] >= lag]
        for hidden in matching:
            if now - payments.created_at[hidden["id"]] < lag:
                key = hidden["metadata"].get(REFERENCE_METADATA_KEY)
                payments.note_fault("search_lag", "payment_intents.search", key=key)
        hits.sort(key=lambda o: payments.order.get(o["id"], 0), reverse=True)
        page = request.params.get("page")
        start = int(page) if isinstance(page, str) and page.isdigit() else 0
        data = [payments.expand(request, o) for o in hits[start : start + limit]]
        more = len(hits) > start + limit
    return {
        "object": "search_result",
        "data": data,
        "has_more": more,
        "next_page": str(start + limit) if more else None,
        "total_count": len(hits),
        "url": "/v1/payment_intents/search",
    }


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
