"""``look_up_invoice``: the invoice as the system of record holds it (Stripe's Invoices API,
found by its number), a ``READ``: what an intent takes amounts and recipients from, so a model
never names them (docs/design.md §6; docs/mcp.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentops.effects import NO_CONTROL, CostClass, HttpTool, Observation, Reply, http_call

# The invoice numbers a renewal takes (commerce.kinds.INVOICE), so a number can never close
# the search query's quotes.
INVOICE_NUMBER = "^[A-Za-z0-9][A-Za-z0-9._/-]{0,63}$"


class LookUpInvoice(HttpTool):
    name = "look_up_invoice"
    description = (
        "Look an invoice up by its number in the system of record: its amount due, currency, "
        "customer email and status. Reads only; changes nothing."
    )
    schema = {
        "type": "object",
        "properties": {
            "invoice": {
                "type": "string",
                "pattern": INVOICE_NUMBER,
                **NO_CONTROL,
                "description": "The invoice's number (INV-2291).",
            }
        },
        "required": ["invoice"],
        "additionalProperties": False,
    }
    cost = CostClass.READ
    base_setting = "STRIPE_API_BASE"
    default_base = "https://api.stripe.com"  # Stripe itself when unset, as for the library
    api_key_setting = "STRIPE_API_KEY"
    method = "GET"
    path = "/v1/invoices/search"
    body_args = False
    evidence = ("id",)
    keep = ("number", "amount_due", "currency", "customer", "customer_email", "status")

    def call(self, args: Mapping[str, Any], *, key: str) -> Observation:
        seen = http_call(
            "GET",
            self.url(self.path, args),
            key=None,
            timeout=self.timeout,
            api_key=self._api_key(),
            params={"query": f"number:'{args['invoice']}'", "limit": 2},
        )
        if not isinstance(seen, Reply) or seen.status >= 300:
            return seen
        found = [
            i
            for i in seen.evidence.get("data") or []
            if isinstance(i, Mapping) and i.get("number") == args["invoice"]
        ]
        if len(found) != 1:
            return Reply(
                404,
                code="resource_missing",
                message=f"no invoice numbered {args['invoice']}"
                if not found
                else f"{len(found)} invoices are numbered {args['invoice']}",
            )
        return Reply(200, evidence=self.evidence_of(found[0]))
