"""Refunds (create, retrieve, list by ``payment_intent``, ``charge`` and ``created`` window) of
a succeeded PaymentIntent's charge, in full or in part, one made in the dashboard (an admin
action), and charges (retrieve).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from sandbox.payments.events import event_emit
from sandbox.payments.params import REFERENCE_METADATA_KEY, int_param, metadata_param
from sandbox.wire import JSON, Request, invalid, missing, new_id

if TYPE_CHECKING:
    from sandbox.payments.provider import Payments


def refund_create(payments: Payments, request: Request, *, via: str = "") -> JSON:
    p = request.params
    pi_id = p.get("payment_intent")
    charge_id = p.get("charge")
    metadata = metadata_param(p)
    amount = int_param(p, "amount", required=False)
    with payments.lock:
        if not pi_id and charge_id:
            charge = payments.charges.get(str(charge_id))
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
        pi = payments.intents.get(str(pi_id))
        if pi is None:
            raise invalid(
                f"No such payment_intent: '{pi_id}'", "payment_intent", "resource_missing"
            )
        if pi["status"] != "succeeded" or pi["latest_charge"] not in payments.charges:
            raise invalid(
                f"This PaymentIntent ({pi_id}) does not have a successful charge to refund.",
                "payment_intent",
                "charge_not_refundable",
            )
        charge = payments.charges[pi["latest_charge"]]
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
        payments.refunds[refund["id"]] = refund
        payments.order[refund["id"]] = len(payments.order)
        charge["amount_refunded"] += amount
        charge["refunded"] = charge["amount_refunded"] >= charge["amount"]
        reference = metadata.get(REFERENCE_METADATA_KEY) or pi["metadata"].get(
            REFERENCE_METADATA_KEY
        )
        payments.record(
            "refunds.create",
            request,
            reference,
            refund["id"],
            payment_intent=pi["id"],
            amount=amount,
            **({"via": via} if via else {}),
        )
        event_emit(payments, "charge.refunded", charge, request)
        return payments.expand(request, refund)


def refund_from_dashboard(payments: Payments, request: Request) -> JSON:
    """``POST /_sandbox/refunds {"payment_intent" (or "charge"), "amount", "reason"}``: a refund
    made by a person in the provider's dashboard — no idempotency key, no metadata of ours —
    as Stripe makes it (the same checks, the same ``charge.refunded`` event). Its ledger entry
    says ``via: dashboard``."""
    wanted = ("payment_intent", "charge", "amount", "reason")
    params = {k: v for k, v in request.params.items() if k in wanted and v is not None}
    if "amount" in params:
        params["amount"] = str(params["amount"])
    return refund_create(payments, replace(request, params=params), via="dashboard")


def refund_retrieve(payments: Payments, request: Request) -> JSON:
    re_id = request.route_params["id"]
    with payments.lock:
        refund = payments.refunds.get(re_id)
        if refund is None:
            raise missing("refund", re_id)
        return payments.expand(request, refund)


def refunds_list(payments: Payments, request: Request) -> JSON:
    with payments.lock:
        items = list(payments.refunds.values())
        pi_id = request.params.get("payment_intent")
        if pi_id:
            items = [r for r in items if r["payment_intent"] == pi_id]
        charge_id = request.params.get("charge")
        if charge_id:
            items = [r for r in items if r["charge"] == charge_id]
        return payments.list_page(request, items, "/v1/refunds")


def charge_retrieve(payments: Payments, request: Request) -> JSON:
    ch_id = request.route_params["id"]
    with payments.lock:
        charge = payments.charges.get(ch_id)
        if charge is None:
            raise missing("charge", ch_id)
        return payments.expand(request, charge)
