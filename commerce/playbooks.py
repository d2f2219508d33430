"""How the scripted planner (``PLANNER=scripted``: the demo and the tests) decides for the
shipped kinds: deterministic playbooks, registered in ``commerce/effects.py``.

They write no link to the customer's page: the harness ends each email with it, whichever
planner wrote the email (``Append`` in commerce/kinds.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentops.effects import Call, Decision, Finish, Refusal, StepFact, StepState, TaskFacts
from agentops.money import money_text
from commerce.customers.declines import decline_in


def _last(facts: TaskFacts, tool: str) -> StepFact | None:
    return next((s for s in reversed(facts.steps) if s.tool == tool), None)


def _customer(refs: Mapping[str, Any]) -> dict[str, Any]:
    """The customer the charge is bound to, when the task names one (an invoice from Stripe
    always does): the charge names exactly the task's, or none when the task names none."""
    return {"customer": refs["customer"]} if refs.get("customer") else {}


def renewal(facts: TaskFacts) -> Decision:
    """Charge the invoice; email the receipt (or, when declined, a notice); finish."""
    r = facts.refs
    charge = _last(facts, "charge_customer")
    if charge is None:
        return Call(
            "charge_customer",
            {
                "invoice": r["invoice"],
                "amount": r["amount"],
                "currency": r.get("currency", "usd"),
                "payment_method": r.get("payment_method", "pm_card_visa"),
                **_customer(r),
            },
        )
    if charge.refusal == Refusal.ALREADY_DONE:
        return Finish(f"{r['invoice']} was already paid; not charging again")
    if charge.refused:
        return Finish(f"another charge for {r['invoice']} is in progress; not charging again")
    if charge.refusal or charge.transient:
        return Finish(f"{r['invoice']} not charged: {charge.detail}")
    email = _last(facts, "send_email")
    if email is None:
        paid = charge.state == StepState.DONE
        amount = money_text(r["amount"], r.get("currency", "usd"))
        decline = decline_in(charge.detail)
        return Call(
            "send_email",
            {
                "to": r["email"],
                "subject": f"{'Receipt' if paid else 'Payment failed'} for {r['invoice']}",
                "body": (
                    f"We received your payment of {amount} for {r['invoice']}. Thank you."
                    if paid
                    else f"Your payment of {amount} for {r['invoice']} did not go through: "
                    f"{decline.reason} No money has been taken."
                ),
                "reference": r["invoice"],
                "purpose": "receipt" if paid else "payment_failed",
            },
        )
    outcome = "renewed" if charge.state == StepState.DONE else "not renewed"
    return Finish(f"{r['invoice']} {outcome}; email {email.state}")


def trip(facts: TaskFacts) -> Decision:
    """The trip saga: its plan's steps in order (by default hold the flight, book the hotel,
    charge the card, email the itinerary). When a step cannot happen, the harness unwinds
    the saga; this playbook is asked only how to go forward."""
    r = facts.refs
    args: dict[str, dict[str, Any]] = {
        "hold_flight": {"flight": r["flight"], "passenger": r["traveller"]},
        "book_hotel": {
            "hotel": r["hotel"],
            "guest": r["traveller"],
            "check_in": r["check_in"],
            "check_out": r["check_out"],
        },
        "charge_customer": {
            "invoice": r["invoice"],
            "amount": r["amount"],
            "currency": r.get("currency", "usd"),
            "payment_method": r.get("payment_method", "pm_card_visa"),
            **_customer(r),
        },
        "send_email": {
            "to": r["email"],
            "subject": f"Your trip {r['invoice']}",
            "body": (
                f"Flight {r['flight']}, hotel {r['hotel']} from {r['check_in']} to "
                f"{r['check_out']}."
            ),
            "reference": r["invoice"],
            "purpose": "itinerary",
        },
    }
    done = {s.tool for s in facts.steps if s.state == StepState.DONE and not s.offset}
    for planned in facts.plan:
        if planned["tool"] not in done:
            return Call(planned["tool"], args[planned["tool"]])
    return Finish(f"trip {r['invoice']} booked")


def reminders(facts: TaskFacts) -> Decision:
    """Reminder N (``reminder`` in each item, 1 by default) of each overdue invoice."""
    tried = {s.args.get("reference") for s in facts.steps if s.tool == "send_email"}
    for item in facts.refs["invoices"]:
        if item["invoice"] not in tried:
            n = item.get("reminder", 1)
            return Call(
                "send_email",
                {
                    "to": item["email"],
                    "subject": f"Reminder {n}: invoice {item['invoice']} is overdue",
                    "body": f"Invoice {item['invoice']} is overdue. Please pay it.",
                    "reference": item["invoice"],
                    "purpose": "reminder",
                    "reminder": n,
                },
            )
    sent = sum(1 for s in facts.steps if s.tool == "send_email" and s.state == StepState.DONE)
    return Finish(f"{sent} of {len(facts.refs['invoices'])} reminders sent")


def customer_link(facts: TaskFacts) -> Decision:
    """Email the customer a fresh link to their payment page (the harness adds the link)."""
    r = facts.refs
    if _last(facts, "send_email") is None:
        return Call(
            "send_email",
            {
                "to": r["email"],
                "subject": f"Your new payment link for {r['invoice']}",
                "body": f"You asked for a new link to the payment page of {r['invoice']}.",
                "reference": r["invoice"],
                "purpose": "link",
            },
        )
    return Finish(f"a new link for {r['invoice']} emailed")


def customer_notice(facts: TaskFacts) -> Decision:
    """Email the customer the notice its references carry (the harness writes its words and
    adds the link whatever is proposed here)."""
    r = facts.refs
    if _last(facts, "send_email") is None:
        return Call(
            "send_email",
            {
                "to": r["email"],
                "subject": r["subject"],
                "body": r["body"],
                "reference": r["invoice"],
                "purpose": r["purpose"],
            },
        )
    return Finish(f"the customer was told of {r['invoice']} ({r['purpose']})")
