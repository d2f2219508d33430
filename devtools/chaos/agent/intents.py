"""What the mcp harness's agent asks for: each task of the plan an intent can carry becomes
the intents it asks for (a renewal's charge, each reminder of a batch; a trip none), the
invoices they name (for the payments provider's record), and their arguments as a model
spells them another time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from devtools.chaos.plan import TaskSpec
from journal.keys import UnsafeName, object_key

INTENT_CHARGE = "charge_invoice"
INTENT_REMINDER = "send_payment_reminder"
CHECK_EFFECT = "check_effect"
EFFECTS_FOR = "effects_for"
IDEMPOTENCY_KEY = "idempotencyKey"
CLIENTS = ("a", "b")
"""The run's two API clients (tokens with the ``mcp`` scope): ``twice`` is the other one."""

SPELLINGS = ("lower", "spaced", "wide", "prefixed", "as_text")
"""How the invoice (or the reminder's number) is spelt otherwise (:func:`spelt`)."""
_WIDE = {c: chr(ord(c) - 0x21 + 0xFF01) for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-"}
ZERO_WIDTH_SPACE = "\u200b"


@dataclass(frozen=True)
class Ask:
    """One intent a conversation asks for: its name, its honest arguments, and the business
    object it names (as the intent's identity names it: ``charge:INV-…``)."""

    intent: str
    args: dict[str, Any]
    object: str

    @property
    def invoice(self) -> str:
        return str(self.args["invoice"])


def asks_of(spec: TaskSpec) -> list[Ask]:
    """The intents a task of the plan becomes over MCP (none for a trip: no intent carries
    one)."""
    if spec.kind == "renewal":
        invoice = spec.refs["invoice"]
        return [Ask(INTENT_CHARGE, {"invoice": invoice}, f"charge:{invoice}")]
    if spec.kind == "reminders":
        return [
            Ask(
                INTENT_REMINDER,
                {"invoice": item["invoice"], "reminder": int(item["reminder"])},
                f"email:reminder:{int(item['reminder'])}:{item['invoice']}",
            )
            for item in spec.refs["invoices"]
        ]
    return []


def invoices_of(specs: Iterable[TaskSpec]) -> list[dict[str, Any]]:
    """The invoices the conversations name, for the payments provider's record: the renewal's
    amount and address; a reminder's address (and an amount of its own)."""
    found: dict[str, dict[str, Any]] = {}
    for spec in specs:
        if spec.kind == "renewal":
            number = spec.refs["invoice"]
            found.setdefault(
                number,
                {
                    "number": number,
                    "amount_due": int(spec.refs["amount"]),
                    "currency": spec.refs.get("currency", "usd"),
                    "customer_email": spec.refs["email"],
                },
            )
        elif spec.kind == "reminders":
            for item in spec.refs["invoices"]:
                found.setdefault(
                    item["invoice"],
                    {
                        "number": item["invoice"],
                        "amount_due": 100 * (1 + len(found) % 90),
                        "currency": "usd",
                        "customer_email": item["email"],
                    },
                )
    return list(found.values())


def spelt(args: Mapping[str, Any], how: str) -> dict[str, Any]:
    """``args`` as a model writes them another time (:data:`SPELLINGS`): the invoice in lower
    case, padded with spaces, in full-width letters with a zero-width space, or prefixed with
    ``Invoice ``; the reminder's number as text (a renewal's invoice padded instead)."""
    out = dict(args)
    invoice = str(args["invoice"])
    if how == "lower":
        out["invoice"] = invoice.lower()
    elif how == "wide":
        out["invoice"] = "".join(_WIDE.get(c, c) for c in invoice[:3]) + invoice[3:]
        out["invoice"] += ZERO_WIDTH_SPACE
    elif how == "prefixed":
        out["invoice"] = f"Invoice {invoice}"
    elif how == "as_text" and "reminder" in args:
        out["reminder"] = str(args["reminder"])
    else:
        out["invoice"] = f"  {invoice} "
    return out


def same_object(found: Any, wanted: str) -> bool:
    """Whether ``found`` (an object an answer names) is ``wanted``, in the guards' normal
    form."""
    if not isinstance(found, str):
        return False
    try:
        return object_key(found) == object_key(wanted)
    except UnsafeName:
        return False
