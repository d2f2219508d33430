"""The support desk's tools, one per cost class: a read, a cheap effect, a full effect and its
undo. Declared as data on ``agentops.effects.HttpTool``; the only code is what names the
business object a credit is for and how a credit's evidence becomes its void.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentops.effects import NO_CONTROL, CostClass, HttpTool, Money

TICKET = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", **NO_CONTROL}
ORDER = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", **NO_CONTROL}
EMAIL = {
    "type": "string",
    "maxLength": 254,
    "pattern": "^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$",
    **NO_CONTROL,
}
AMOUNT = {"type": "integer", "minimum": 1, "description": "in minor units (1500 = 15.00)"}
CURRENCY = {"enum": ["eur", "usd", "gbp"]}


def arguments(required: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON schema for exactly these arguments, all required."""
    return {
        "type": "object",
        "properties": dict(required),
        "required": list(required),
        "additionalProperties": False,
    }


class SupportApi(HttpTool):
    """The support desk's HTTP API: where it is, and how long it remembers keys."""

    base_setting = "SUPPORT_API_BASE"
    key_lifetime_setting = "SUPPORT_KEY_LIFETIME_SECONDS"
    evidence = ("id",)


class LookUpOrder(SupportApi):
    name = "look_up_order"
    description = "Look an order up: its customer, total and status. Changes nothing."
    schema = arguments({"order": ORDER})
    cost = CostClass.READ  # no effect: retried a few times, never keyed, never looked up
    method = "GET"
    path = "/v1/orders/{order}"
    keep = ("customer", "total", "currency", "status")


class PostNote(SupportApi):
    name = "post_note"
    description = "Post a note about a ticket to the support team's channel (cannot be taken back)."
    schema = arguments(
        {"ticket": TICKET, "text": {"type": "string", "minLength": 1, "maxLength": 2000}}
    )
    cost = CostClass.CHEAP  # a second note is noise, not harm: keyed and resent, never looked up
    irreversible = True  # a note read cannot be unread: a saga posts it last
    path = "/v1/notes"


class IssueCredit(SupportApi):
    name = "issue_credit"
    description = (
        "Give the customer store credit for a ticket, once per ticket (void_credit undoes it)."
    )
    schema = arguments(
        {
            "ticket": TICKET,
            "order": ORDER,
            "customer": EMAIL,
            "amount": AMOUNT,
            "currency": CURRENCY,
        }
    )
    money = Money(amount="amount", currency="currency")  # the kind caps it
    path = "/v1/credits"
    key_field = "reference"  # our key travels on the credit: found again by it
    lookup_path = "/v1/credits"  # GET /v1/credits?reference=<key>
    keep = ("status", "amount", "currency")
    compensation = "void_credit"

    def guard(self, args: Mapping[str, Any]) -> str | None:
        return f"credit:{args['ticket']}"

    def once(self, args: Mapping[str, Any]) -> bool:
        return True  # one goodwill credit per ticket, until it is voided

    def undo_args(self, args: Mapping[str, Any], evidence: Mapping[str, Any]) -> dict[str, Any]:
        return {"credit": evidence["id"]}


class VoidCredit(SupportApi):
    name = "void_credit"
    description = "Void a store credit this task issued."
    schema = arguments({"credit": {"type": "string", "pattern": "^cr_[A-Za-z0-9]{1,64}$"}})
    path = "/v1/credits/{credit}/void"
    lookup_path = "/v1/credits/{credit}"  # it landed iff the credit shows it
    done_when = {"status": "voided"}
    keep = ("status",)

    def guard(self, args: Mapping[str, Any]) -> str | None:
        return f"void:{args['credit']}"

    def once(self, args: Mapping[str, Any]) -> bool:
        return True
