"""``look_up_invoice``: the invoice as the system of record holds it (Stripe's Invoices API,
found by its number), a ``READ``: what an intent takes amounts and recipients from, so a model
never names them (docs/design.md §6; docs/mcp.md)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agentops.effects import (
    NO_CONTROL,
    CostClass,
    HttpTool,
    Observation,
    Reply,
    http_call,
    same_object,
)

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
    keep = ("number", "amount_due", "currency", "customer", "customer_email", "status", "lines")

    def call(self, args: Mapping[str, Any], *, key: str) -> Observation:
        """The invoice whose number is ``invoice`` in the journal's normal form
        (``journal.keys.same_object``): ``inv-2291`` and ``Inv-2291`` find INV-2291, as they
        name the same charge. Searched as spelt, then in capitals and in small letters (an
        exact search misses another case; numbers are mostly capitals)."""
        wanted = args["invoice"]
        seen: Observation = Reply(404, code="resource_missing")
        found: list[Mapping[str, Any]] = []
        for spelling in _spellings(wanted):
            seen = self._search(spelling)
            if not isinstance(seen, Reply) or seen.status >= 300:
                return seen
            found = [
                i
                for i in seen.evidence.get("data") or []
                if isinstance(i, Mapping)
                and isinstance(i.get("number"), str)
                and same_object(i["number"], wanted)
            ]
            if found:
                break
        if len(found) != 1:
            return Reply(
                404,
                code="resource_missing",
                message=f"no invoice numbered {wanted}"
                if not found
                else f"{len(found)} invoices are numbered {wanted}",
            )
        return Reply(200, evidence=self.evidence_of(found[0]))

    def _search(self, number: str) -> Observation:
        return http_call(
            "GET",
            self.url(self.path, {"invoice": number}),
            key=None,
            timeout=self.timeout,
            api_key=self._api_key(),
            params={"query": f"number:'{number}'", "limit": 2},
        )


def _spellings(number: str) -> list[str]:
    """The spellings an invoice number is searched by: as given (trimmed), in capitals, in
    small letters; each once, and only those the search query can quote."""
    name = "".join(number.split())
    kept = (name, name.upper(), name.lower())
    return [s for s in dict.fromkeys(kept) if re.fullmatch(INVOICE_NUMBER, s)]
