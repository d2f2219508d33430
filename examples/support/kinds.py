"""``goodwill``: store credit for a support ticket, and a note that tells the team.

What a goodwill task is for, and what the harness holds it to whatever the planner proposes:
its references, checked at the door; every tool's arguments bound to them; at most 50.00 of
credit per task; ten steps; and a saga — the credit is voided if the team cannot be told.
"""

from __future__ import annotations

from agentops.effects import Kind, Own, Ref, Saga, refs_object
from examples.support.tools import AMOUNT, CURRENCY, EMAIL, ORDER, TICKET

GOODWILL_CAPS = {"eur": 5_000, "usd": 5_000, "gbp": 5_000}  # 50.00 a task, per currency

GOODWILL = Kind(
    name="goodwill",
    description="Give a customer store credit for a support ticket, and tell the team.",
    refs_schema=refs_object(
        {"ticket": TICKET, "order": ORDER, "email": EMAIL, "amount": AMOUNT, "currency": CURRENCY},
        ["ticket", "order", "email", "amount", "currency"],
    ),
    binds={
        "look_up_order": (Ref("order", "order"),),
        "issue_credit": (
            Ref("ticket", "ticket"),
            Ref("order", "order"),
            Ref("customer", "email"),
            Ref("amount", "amount"),
            Ref("currency", "currency"),
        ),
        # Only a credit this task issued, named by its evidence; the harness links the two.
        "void_credit": (Own("credit", "issue_credit", "id"),),
        "post_note": (Ref("ticket", "ticket"),),
    },
    money_caps=GOODWILL_CAPS,
    max_steps=10,
    references=("ticket",),
    # The credit, then the note (which cannot be undone, so it goes last); a note the desk
    # refuses voids the credit: no credit the team was not told of.
    saga=Saga(steps=("issue_credit", "post_note")),
)
