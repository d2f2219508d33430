"""The shipped task kinds: renewals, trips, reminders (docs/design.md §6, §7).

Each says what a task of it is for — its references, the tools it may use and how their
arguments bind to the references, the money it may move, its saga — through
``agentops.effects.Kind``, as any app's kinds do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agentops.effects import (
    NO_CONTROL,
    Append,
    Bind,
    Closing,
    Followup,
    Kind,
    OneOf,
    Own,
    ProviderEffect,
    Ref,
    Row,
    Saga,
    StepState,
    TaskFacts,
    UnsafeName,
    object_key,
    refs_object,
)
from agentops.money import money_text
from commerce.customers.links import LINK_KIND, NOTICE_KIND, email_link
from commerce.tools.email import EMAIL_PATTERN

# Anchored patterns let one trailing newline through ($ matches before it): NO_CONTROL too.
INVOICE = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._/-]{0,63}$", **NO_CONTROL}
EMAIL = {"type": "string", "maxLength": 254, "pattern": EMAIL_PATTERN, **NO_CONTROL}
CURRENCIES = ("usd", "eur", "gbp")
CURRENCY = {"enum": list(CURRENCIES)}
AMOUNT = {"type": "integer", "minimum": 1, "description": "in minor units (4900 = 49.00)"}
PAYMENT_METHOD = {"type": "string", "pattern": "^pm_[A-Za-z0-9_]{1,100}$", **NO_CONTROL}
CUSTOMER = {"type": "string", "pattern": "^cus_[A-Za-z0-9]{1,100}$", **NO_CONTROL}
NAME = {"type": "string", "minLength": 1, "maxLength": 200, **NO_CONTROL}
DATE = {"type": "string", "format": "date"}
FLIGHT = {"type": "string", "pattern": "^[A-Z0-9]{2,8}$", **NO_CONTROL}

DEFAULT_CURRENCY = "usd"
DEFAULT_PAYMENT_METHOD = "pm_card_visa"

# The invoice's lines as its record has them (Stripe's line items: what each is and its
# amount, in the invoice's currency), for the receipt: what the charge was made for.
LINES = {
    "type": "array",
    "maxItems": 100,
    "items": {
        "type": "object",
        "properties": {
            "description": {"type": "string", "maxLength": 500, **NO_CONTROL},
            "quantity": {"type": "integer", "minimum": 0},
            "amount": {"type": "integer", "description": "in minor units, the line's total"},
        },
        "required": ["description", "amount"],
        "additionalProperties": False,
    },
}

PAYMENT_REFS = {
    "invoice": INVOICE,
    "amount": AMOUNT,
    "currency": CURRENCY,
    "email": EMAIL,
    "payment_method": PAYMENT_METHOD,
    "customer": CUSTOMER,
    "lines": LINES,
}


CHARGE_BINDS: tuple[Bind, ...] = (
    Ref("invoice", "invoice"),
    Ref("amount", "amount"),
    Ref("currency", "currency", DEFAULT_CURRENCY),
    Ref("payment_method", "payment_method", DEFAULT_PAYMENT_METHOD),
    # The customer the invoice names (cus_…): a Stripe id, in which case tells two apart.
    Ref("customer", "customer", None, exact=True),
)


def _amount_within_cap(caps: Mapping[str, int]) -> Callable[[Mapping[str, Any]], list[str]]:
    def check(refs: Mapping[str, Any]) -> list[str]:
        currency = refs.get("currency", DEFAULT_CURRENCY)
        cap = caps.get(currency, 0)
        if isinstance(refs.get("amount"), int) and refs["amount"] > cap:
            return [
                f"amount: {refs['amount']} ({money_text(refs['amount'], currency)}) is over "
                f"this kind's limit of {money_text(cap, currency)}"
            ]
        return []

    return check


def _stay_is_a_night_or_more(refs: Mapping[str, Any]) -> list[str]:
    check_in, check_out = refs.get("check_in"), refs.get("check_out")
    if isinstance(check_in, str) and isinstance(check_out, str) and check_out <= check_in:
        return [f"check_out: {check_out} is not after check_in {check_in}"]
    return []


def _invoices_distinct(refs: Mapping[str, Any]) -> list[str]:
    try:
        names = [object_key(str(i.get("invoice"))) for i in refs.get("invoices") or []]
    except UnsafeName:
        return []  # said by _names_are_safe
    return ["invoices: an invoice is listed twice"] if len(names) != len(set(names)) else []


def _refunded(facts: TaskFacts) -> tuple[int, str] | None:
    """What the task's own refund of its charge gave back (its evidence's amount, the
    charge's whole when it does not say), or None when no refund of it is done."""
    for step in facts.steps:
        if step.tool == "refund_charge" and step.state == StepState.DONE:
            charged = next(
                (s for s in facts.steps if s.n == step.offsets and s.tool == "charge_customer"),
                None,
            )
            whole = charged.args if charged is not None else {}
            amount = step.evidence.get("amount", whole.get("amount"))
            currency = str(step.evidence.get("currency") or whole.get("currency") or "usd")
            if isinstance(amount, int):
                return amount, currency
    return None


def _another_tasks(facts: TaskFacts) -> bool:
    """Whether a step of the task was refused because another task's effect on the same
    object stands (or is in flight): the same trip asked for twice, say."""
    own = {s.key for s in facts.steps}
    return any(s.refused and s.refused_by and s.refused_by not in own for s in facts.steps)


def _trip_cancelled(refs: Mapping[str, Any], facts: TaskFacts) -> dict[str, Any] | None:
    """A trip's closing message: it was cancelled (a person rejected it, or it could not be
    booked and was undone), nothing is owed, and the refund, if the card was charged. None
    when it stopped because another task holds the trip: that one's traveller is told
    whatever becomes of it, and theirs may stand (the chaos run found a trip asked for twice
    telling its traveller it was cancelled while the first task's booking stood)."""
    if _another_tasks(facts):
        return None
    refund = _refunded(facts)
    money = (
        f"The payment of {money_text(*refund)} was refunded to your card in full; your bank "
        "may take a few days to show it."
        if refund
        else "No money has been taken."
    )
    held = any(s.offsets is not None and s.state == StepState.DONE for s in facts.steps)
    what = (
        f"flight {refs['flight']} and the hotel {refs['hotel']} from {refs['check_in']} to "
        f"{refs['check_out']} are no longer held for you"
        if held
        else "nothing was held for you"
    )
    return {
        "to": refs["email"],
        "subject": f"Your trip {refs['invoice']} was cancelled",
        "body": f"Your trip {refs['invoice']} was cancelled: {what}. Nothing is owed. {money}",
        "reference": refs["invoice"],
        "purpose": "cancellation",
    }


def _renewal_refunded(refs: Mapping[str, Any], facts: TaskFacts) -> dict[str, Any] | None:
    """A renewal's closing message, when a person's compensation refunded its charge."""
    refund = _refunded(facts)
    if refund is None:
        return None  # nothing was taken: nothing to tell
    return {
        "to": refs["email"],
        "subject": f"Refund for {refs['invoice']}",
        "body": (
            f"We refunded your payment of {money_text(*refund)} for {refs['invoice']} in "
            "full. It goes back to the card you paid with; your bank may take a few days to "
            "show it."
        ),
        "reference": refs["invoice"],
        "purpose": "refund",
    }


# --- Telling the customer when no task of the payment runs again -----------------------------


class Written(Append):
    """The harness writes the whole text argument ``arg`` (``text(facts, args)``), whatever
    the planner proposed: a message whose words the kind's own code chose (a customer notice's
    subject and body, from its references), as :class:`Append` writes the link after it."""

    def fill(self, args: Mapping[str, Any], facts: TaskFacts) -> dict[str, Any]:
        written = self.text(facts, args)
        return {**args, self.arg: written} if written else dict(args)


def _ref_text(name: str) -> Callable[[TaskFacts, Mapping[str, Any]], str | None]:
    def text(facts: TaskFacts, args: Mapping[str, Any]) -> str | None:
        value = facts.refs.get(name)
        return value if isinstance(value, str) and value else None

    return text


def _notice(refs: Mapping[str, Any], message: Mapping[str, Any], **more: str) -> Followup:
    """The customer_notice task that sends ``message`` (send_email's arguments) once."""
    return Followup(
        kind=NOTICE_KIND,
        goal=f"Tell the customer about {refs['invoice']}: {message['subject']}",
        refs={
            "invoice": refs["invoice"],
            "email": refs["email"],
            "purpose": message["purpose"],
            "subject": message["subject"],
            "body": message["body"],
            **more,
        },
    )


def _emailed(facts: TaskFacts) -> bool:
    """Whether the task sent the customer an email (each ends with the page's link)."""
    return any(s.tool == "send_email" and s.state == StepState.DONE for s in facts.steps)


def _charge_stands(facts: TaskFacts) -> bool:
    return any(
        s.tool == "charge_customer" and s.state == StepState.DONE and not s.offset
        for s in facts.steps
    )


def _trip_cancel_told(refs: Mapping[str, Any], facts: TaskFacts) -> Followup | None:
    """A trip an operator cancelled outright: the traveller is told, as a compensated trip's
    closing tells them, when there is something to tell — something was held for them (and
    let go: a trip is cancelled only once its saga's effects are undone), their card was
    refunded, or an email with the page's link reached them. Nothing held, nothing sent:
    they never heard of it, and are not written to now."""
    held = any(s.offsets is not None and s.state == StepState.DONE for s in facts.steps)
    if not (held or _emailed(facts) or _refunded(facts)):
        return None
    # None when another task holds the trip's effects and tells the traveller itself.
    message = _trip_cancelled(refs, facts)
    return _notice(refs, message) if message is not None else None


def _renewal_cancel_told(refs: Mapping[str, Any], facts: TaskFacts) -> Followup | None:
    """A renewal an operator cancelled outright: the customer is told when they had heard of
    it (an email with the page's link: a declined card's "pay with another card") or their
    card was refunded, and only if no payment stands (a paid invoice was not cancelled: the
    page still says Paid)."""
    if _charge_stands(facts) or not (_emailed(facts) or _refunded(facts)):
        return None
    refund = _refunded(facts)
    amount = refs.get("amount")
    currency = str(refs.get("currency") or "usd")
    what = f"The payment of {money_text(amount, currency)}" if isinstance(amount, int) else "It"
    money = (
        f"The payment of {money_text(*refund)} was refunded to your card in full; your bank "
        "may take a few days to show it."
        if refund
        else "No money has been taken."
    )
    return _notice(
        refs,
        {
            "subject": f"{refs['invoice']} was cancelled",
            "body": (
                f"{what} for {refs['invoice']} was cancelled: nothing is owed, and there is "
                f"nothing for you to do. {money}"
            ),
            "purpose": "cancellation",
        },
    )


def _refunded_elsewhere(
    refs: Mapping[str, Any], facts: TaskFacts, effect: ProviderEffect
) -> Followup | None:
    """A payment the provider audit found refunded at the provider (its dashboard, its
    support), once a person resolved the finding: the customer is told once of each refund,
    the notice keyed by the refund's id (commerce/audits.py lists each refund of a payment,
    and the audit makes each a finding of its own; the payment's own id when the listing did
    not say), with that refund's amount: two partial refunds are two messages."""
    if effect.tool != "charge_customer":
        return None
    raw = effect.raw
    currency = str(effect.currency or refs.get("currency") or "usd")
    whole = effect.amount if isinstance(effect.amount, int) else refs.get("amount")
    refund = effect.undone_by[0] if effect.undone_by else str(effect.provider_id)
    listed = raw.get("refunds")
    listed = listed if isinstance(listed, list) else []
    this = next((r for r in listed if isinstance(r, dict) and r.get("id") == refund), None)
    refunded = this.get("amount") if this is not None else raw.get("amount_refunded")
    if not isinstance(refunded, int) or refunded <= 0:
        refunded = whole
    if not isinstance(refunded, int):
        return None
    if isinstance(whole, int) and refunded < whole:
        said = (
            f"We refunded {money_text(refunded, currency)} of your payment of "
            f"{money_text(whole, currency)} for {refs['invoice']}."
        )
    else:
        said = (
            f"We refunded your payment of {money_text(refunded, currency)} for "
            f"{refs['invoice']} in full."
        )
    return _notice(
        refs,
        {
            "subject": f"Refund for {refs['invoice']}",
            "body": (
                f"{said} It goes back to the card you paid with; your bank may take a few "
                "days to show it."
            ),
            "purpose": "refund",
        },
        refund=refund,
    )


RENEWAL_CAPS = {"usd": 100_000, "eur": 100_000, "gbp": 100_000}
TRIP_CAPS = {"usd": 500_000, "eur": 500_000, "gbp": 500_000}

KINDS: tuple[Kind, ...] = (
    Kind(
        name="renewal",
        description="Charge an invoice and email the receipt (or a notice if declined).",
        refs_schema=refs_object(PAYMENT_REFS, ["invoice", "amount", "email"]),
        binds={
            "charge_customer": CHARGE_BINDS,
            # Its own charge, whole: how a person's compensation undoes a charge that landed
            # late (docs/design.md §7), keyed and reconciled like a saga's.
            "refund_charge": (
                Own("payment_intent", "charge_customer", "payment_intent", "amount"),
            ),
            "send_email": (
                Ref("to", "email"),
                Ref("reference", "invoice"),
                OneOf("purpose", ("receipt", "payment_failed")),
                # The customer's page, bound to the task: the harness ends the email with it.
                Append("body", email_link),
            ),
        },
        money_caps=RENEWAL_CAPS,
        max_steps=10,
        refs_checks=(_amount_within_cap(RENEWAL_CAPS),),
        references=("invoice",),
        customer=("email",),
        # A charge a person's compensation refunded: the customer is told, once.
        closing=Closing("send_email", _renewal_refunded),
        # Cancelled outright, or refunded at the provider: told by a notice of its own.
        on_cancel=_renewal_cancel_told,
        on_undone_elsewhere=_refunded_elsewhere,
    ),
    Kind(
        name="trip",
        description="Hold a flight, book a hotel, charge the card, email the itinerary.",
        refs_schema=refs_object(
            {
                **PAYMENT_REFS,
                "flight": FLIGHT,
                "traveller": NAME,
                "hotel": NAME,
                "check_in": DATE,
                "check_out": DATE,
            },
            [
                "invoice",
                "amount",
                "email",
                "flight",
                "traveller",
                "hotel",
                "check_in",
                "check_out",
            ],
        ),
        binds={
            "hold_flight": (Ref("flight", "flight"), Ref("passenger", "traveller")),
            "release_flight": (Own("hold", "hold_flight", "id"),),
            "book_hotel": (
                Ref("hotel", "hotel"),
                Ref("guest", "traveller"),
                Ref("check_in", "check_in"),
                Ref("check_out", "check_out"),
            ),
            "cancel_hotel": (Own("booking", "book_hotel", "id"),),
            "charge_customer": CHARGE_BINDS,
            "refund_charge": (
                Own("payment_intent", "charge_customer", "payment_intent", "amount"),
            ),
            "send_email": (
                Ref("to", "email"),
                Ref("reference", "invoice"),
                OneOf("purpose", ("itinerary", "notice")),
                Append("body", email_link),
            ),
        },
        money_caps=TRIP_CAPS,
        max_steps=20,
        refs_checks=(_amount_within_cap(TRIP_CAPS), _stay_is_a_night_or_more),
        references=("invoice", "traveller"),
        customer=("traveller", "email"),
        saga=Saga(
            steps=("hold_flight", "book_hotel", "charge_customer", "send_email"),
            # Trips above 3,000.00 are approved by a person before the card is charged.
            hold_over={"charge_customer": 300_000},
            verify_before=frozenset({"charge_customer"}),
        ),
        # Rejected by a person, or undone because a step could not happen: the traveller is
        # told, once, that it was cancelled (and refunded, if the card was charged).
        closing=Closing("send_email", _trip_cancelled),
        on_cancel=_trip_cancel_told,
        on_undone_elsewhere=_refunded_elsewhere,
    ),
    Kind(
        name=NOTICE_KIND,
        description=(
            "Email a customer what became of their payment (cancelled, refunded at the "
            "provider), in the words its references carry."
        ),
        refs_schema=refs_object(
            {
                "invoice": INVOICE,
                "email": EMAIL,
                "purpose": {"enum": ["cancellation", "refund"]},
                "subject": {"type": "string", "minLength": 1, "maxLength": 200, **NO_CONTROL},
                "body": {"type": "string", "minLength": 1, "maxLength": 5000},
                # What it is about, when more than the invoice: the refund's id.
                "refund": {"type": "string", "pattern": "^[A-Za-z0-9_]{1,100}$"},
            },
            ["invoice", "email", "purpose", "subject", "body"],
        ),
        binds={
            "send_email": (
                Ref("to", "email"),
                Ref("reference", "invoice"),
                Ref("purpose", "purpose"),
                # The words are the kind's code's, never a model's: written by the harness.
                Written("subject", _ref_text("subject")),
                Written("body", _ref_text("body")),
                Append("body", email_link),
            ),
        },
        max_steps=3,
        references=("invoice",),
        customer=("email",),
    ),
    Kind(
        name=LINK_KIND,
        description="Email a customer a fresh link to their payment page, which they asked for.",
        refs_schema=refs_object({"invoice": INVOICE, "email": EMAIL}, ["invoice", "email"]),
        binds={
            "send_email": (
                Ref("to", "email"),
                Ref("reference", "invoice"),
                OneOf("purpose", ("link",)),
                # The page, bound to this task: the harness ends the email with it.
                Append("body", email_link),
            ),
        },
        max_steps=3,
        references=("invoice",),
    ),
    Kind(
        name="reminders",
        description="Email reminder N of each overdue invoice listed.",
        refs_schema=refs_object(
            {
                "invoices": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 100,
                    "items": refs_object(
                        {
                            "invoice": INVOICE,
                            "email": EMAIL,
                            "reminder": {"type": "integer", "minimum": 1, "maximum": 100},
                        },
                        ["invoice", "email"],
                    ),
                }
            },
            ["invoices"],
        ),
        binds={
            "send_email": (
                OneOf("purpose", ("reminder",)),
                Row(
                    "invoices",
                    by=("reference", "invoice"),
                    fields={"to": ("email", None), "reminder": ("reminder", 1)},
                ),
            ),
        },
        money_caps={},
        max_steps=100,
        refs_checks=(_invoices_distinct,),
        references=("invoices.*.invoice",),
        customer=("invoices.*.email",),
    ),
)
