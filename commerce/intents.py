"""The shipped kinds' intents, served over MCP (``manage.py mcp_server``):
"the charge for this invoice" and "reminder N of this invoice". The agent names the invoice
(and the reminder's number); the amount, currency and address come from the invoice as the
system of record holds it (``look_up_invoice``), never from the agent."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agentops.effects import NO_CONTROL, Intent, IntentRefused, Records
from commerce.kinds import CURRENCIES
from commerce.tools.invoices import INVOICE_NUMBER

INVOICE_ARG = {
    "type": "string",
    "pattern": INVOICE_NUMBER,
    **NO_CONTROL,
    "description": "The invoice's number, as the system of record holds it (INV-2291).",
}


def open_invoice(records: Records, number: str, *, doing: str) -> dict[str, Any]:
    """The invoice, if it is open and can be acted on; else the sentence the agent is told."""
    invoice = records.read("look_up_invoice", {"invoice": number})
    status = invoice.get("status")
    if status != "open":
        raise IntentRefused(
            f"invoice {number} is {status} in the system of record: there is nothing to {doing}"
        )
    if invoice.get("currency") not in CURRENCIES:
        raise IntentRefused(f"invoice {number} is in {invoice.get('currency')}, not charged here")
    if not invoice.get("customer_email"):
        raise IntentRefused(f"invoice {number} names no customer email")
    return invoice


# A line's description as the receipt shows it: printable, and no longer than the ref allows.
_UNPRINTABLE = re.compile("[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]+")


def record_lines(invoice: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The invoice's line items as its record lists them (Stripe's ``lines.data``), as the
    task keeps them for the receipt: each line's description (printable, cut to 500
    characters), quantity and amount (minor units, in the invoice's currency). A line without
    an integer amount, or more than 100 of them, is more than a receipt shows: none then."""
    listed = invoice.get("lines")
    items = listed.get("data") if isinstance(listed, Mapping) else listed
    if not isinstance(items, list) or len(items) > 100:
        return []
    lines = []
    for item in items:
        if not isinstance(item, Mapping) or type(item.get("amount")) is not int:
            return []
        said = _UNPRINTABLE.sub(" ", str(item.get("description") or "")).strip()[:500]
        line: dict[str, Any] = {"description": said, "amount": item["amount"]}
        if type(item.get("quantity")) is int and item["quantity"] >= 0:
            line["quantity"] = item["quantity"]
        lines.append(line)
    return lines


def charge_refs(args: Mapping[str, Any], records: Records) -> dict[str, Any]:
    invoice = open_invoice(records, args["invoice"], doing="charge")
    refs = {
        "invoice": invoice["number"],
        "amount": invoice["amount_due"],
        "currency": invoice["currency"],
        "email": invoice["customer_email"],
    }
    if invoice.get("customer"):
        refs["customer"] = invoice["customer"]
    lines = record_lines(invoice)
    if lines:
        refs["lines"] = lines  # what the charge is for, on the receipt
    return refs


def reminder_refs(args: Mapping[str, Any], records: Records) -> dict[str, Any]:
    invoice = open_invoice(records, args["invoice"], doing="remind the customer of")
    row = {
        "invoice": invoice["number"],
        "email": invoice["customer_email"],
        "reminder": args["reminder"],
    }
    return {"invoices": [row]}


CHARGE_INVOICE = Intent(
    name="charge_invoice",
    title="Charge an invoice",
    description=(
        "Charge the customer for an invoice, once: the amount, currency and customer come from "
        "the invoice in the system of record, and a receipt is emailed when it is paid. Asking "
        "again for the same invoice never charges twice: you are told what became of the "
        "charge (done with its evidence, or unknown and being checked)."
    ),
    schema={
        "type": "object",
        "properties": {"invoice": INVOICE_ARG},
        "required": ["invoice"],
        "additionalProperties": False,
    },
    kind="renewal",
    effect="charge_customer",
    identity=lambda args: f"charge:{args['invoice']}",
    refs=charge_refs,
    reads=("look_up_invoice",),
    goal=lambda args: f"Charge invoice {args['invoice']} (asked over MCP)",
    noun="charge",
    subject=lambda args: f"invoice {args['invoice']}",
)

SEND_PAYMENT_REMINDER = Intent(
    name="send_payment_reminder",
    title="Send a payment reminder",
    description=(
        "Email reminder number N that an invoice is overdue to the customer the invoice names, "
        "once per invoice and number. Asking again for the same reminder never sends it twice: "
        "you are told whether it was sent, with the message's id."
    ),
    schema={
        "type": "object",
        "properties": {
            "invoice": INVOICE_ARG,
            "reminder": {
                "type": "integer",
                "minimum": 1,
                "maximum": 100,
                "description": "Which reminder of this invoice it is (1 for the first).",
            },
        },
        "required": ["invoice", "reminder"],
        "additionalProperties": False,
    },
    kind="reminders",
    effect="send_email",
    identity=lambda args: f"email:reminder:{args['reminder']}:{args['invoice']}",
    refs=reminder_refs,
    reads=("look_up_invoice",),
    goal=lambda args: f"Send reminder {args['reminder']} of invoice {args['invoice']} (over MCP)",
    noun="reminder",
    subject=lambda args: f"reminder {args['reminder']} of invoice {args['invoice']}",
)

INTENTS = (CHARGE_INVOICE, SEND_PAYMENT_REMINDER)
