"""An invoice's payment as its customer sees it: done, not done, or unknown — never two."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from django.db.models import Q

from agentops.audit.models import Finding, FindingKind
from agentops.effects import (
    FINAL,
    GUARD_REFUSALS,
    LIVE_STATES,
    Step,
    StepState,
    Task,
    UnsafeName,
    object_key,
)
from agentops.money import money_text
from commerce.customers.declines import Decline, decline_for
from commerce.customers.links import MESSAGE_KINDS

# A task's ends that call its payment off (an operator's cancel, a saga undone).
CALLED_OFF = ("cancelled", "compensated")


class PaymentState(StrEnum):
    DONE = "done"
    NOT_DONE = "not_done"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class ReceiptLine:
    """One line of the invoice a payment was made for, as the receipt says it."""

    description: str
    quantity: int | None
    amount_text: str


def receipt_lines(refs: Any, currency: str) -> tuple[ReceiptLine, ...]:
    """The invoice's lines the charging task took from the record (its ``lines`` ref,
    commerce/intents.py ``record_lines``), each amount in major units with the currency;
    none when its task names none."""
    lines = refs.get("lines") if isinstance(refs, dict) else None
    if not isinstance(lines, list):
        return ()
    return tuple(
        ReceiptLine(
            description=str(line.get("description") or ""),
            quantity=line["quantity"] if type(line.get("quantity")) is int else None,
            amount_text=money_text(line["amount"], currency),
        )
        for line in lines
        if isinstance(line, dict) and type(line.get("amount")) is int
    )


@dataclass(frozen=True)
class Payment:
    invoice: str
    state: PaymentState
    amount: int | None = None
    currency: str = ""
    paid_at: datetime | None = None
    reference: str = ""
    next_check_at: datetime | None = None
    # Refunded: by the journal's own undo (whole), or at the provider (its dashboard, its
    # support), as the provider audit found it (in full or in part).
    refunded: bool = False
    refunded_at: datetime | None = None
    refunded_amount: int | None = None
    retryable: bool = False
    # Not done: the provider's reason (a decline code, commerce/customers/declines.py) and
    # the card that was declined, never to be charged again without the customer's say.
    decline_code: str = ""
    declined_card: str = ""
    # Not done because the task that would have charged was called off (an operator
    # cancelled it, or its saga was compensated): nothing is owed.
    cancelled: bool = False
    cancelled_at: datetime | None = None
    kind: str = ""
    # The card it was paid with, as the receipt says it ("Visa ending 4242"): from the
    # charge's evidence (its brand and last four digits only); empty when it does not say.
    card: str = ""
    # What it was paid for: the invoice's lines, as the record the charge was made for has
    # them (the charging task's references); none when the task names none.
    lines: tuple[ReceiptLine, ...] = ()

    @property
    def amount_text(self) -> str:
        if self.amount is None:
            return ""
        return money_text(self.amount, self.currency)

    @property
    def refunded_text(self) -> str:
        if self.refunded_amount is None:
            return self.amount_text
        return money_text(self.refunded_amount, self.currency)

    @property
    def refunded_in_part(self) -> bool:
        return (
            self.refunded_amount is not None
            and self.amount is not None
            and 0 < self.refunded_amount < self.amount
        )

    @property
    def decline(self) -> Decline:
        return decline_for(self.decline_code)


def payment_of(*, invoice: str) -> Payment | None:
    """The state of the invoice's payment, from the journal; None when no task knows it."""
    try:
        charged = object_key(f"charge:{invoice}")  # the guards' own normal form
    except UnsafeName:
        return None
    # The tasks that name the invoice, and those that charged it (found by the guards' index:
    # no join of every task with every step).
    # (Not a task that only emailed the customer, a fresh link or what became of the payment:
    # it says nothing of the payment itself.)
    tasks = Task.objects.filter(
        Q(refs__invoice__iexact=invoice)
        | Q(pk__in=Step.objects.filter(guard_key=charged).values("task_id"))
    ).exclude(kind__in=MESSAGE_KINDS)
    if not tasks.exists():
        return None
    charge = (
        Step.objects.filter(tool="charge_customer", guard_key=charged)
        .exclude(refusal__in=GUARD_REFUSALS)
        .order_by("-created_at", "-n")
        .first()
    )
    # Any task not over may still charge: one advancing, one held for approval, one a person
    # is looking at. Until it is over, the customer is told to wait, never "not paid".
    in_progress = tasks.exclude(status__in=FINAL).exists()
    retryable = tasks.filter(kind="renewal").exists()
    newest = tasks.order_by("-created_at").only("kind", "status", "refs").first()
    kind = newest.kind if newest else ""
    refs = newest.refs if newest is not None and isinstance(newest.refs, dict) else {}
    # What the invoice is for, as its task says, until a charge says what was asked.
    asked = refs.get("amount") if isinstance(refs.get("amount"), int) else None
    asked_in = str(refs.get("currency") or "usd")
    # The latest word on the invoice is that it was called off: nothing is owed.
    called_off = newest is not None and newest.status in CALLED_OFF
    ended: dict[str, Any] = {
        "kind": kind,
        "cancelled": called_off,
        "cancelled_at": newest.entries.order_by("-id").values_list("at", flat=True).first()
        if called_off and newest
        else None,
        "retryable": retryable and not called_off,
    }
    if charge is None:
        if in_progress:
            return Payment(
                invoice=invoice,
                state=PaymentState.UNKNOWN,
                amount=asked,
                currency=asked_in,
                kind=kind,
            )
        return Payment(
            invoice=invoice, state=PaymentState.NOT_DONE, amount=asked, currency=asked_in, **ended
        )
    amount, currency = charge.args.get("amount"), str(charge.args.get("currency", ""))
    if charge.state in LIVE_STATES:
        return Payment(
            invoice=invoice,
            state=PaymentState.UNKNOWN,
            amount=amount,
            currency=currency,
            next_check_at=charge.next_check_at,
        )
    if charge.state == StepState.DONE and charge.offset_by_id is None:
        at_provider = _refunded_at_provider(charge)
        return Payment(
            invoice=invoice,
            state=PaymentState.DONE,
            amount=amount,
            currency=currency,
            paid_at=charge.settled_at,
            reference=_reference(charge),
            card=card_text(charge.evidence),
            lines=receipt_lines(
                Task.objects.filter(pk=charge.task_id).values_list("refs", flat=True).first(),
                currency,
            ),
            refunded=at_provider is not None,
            # Not when it was refunded: the audit says only when it found it.
            refunded_amount=at_provider[1] if at_provider else None,
            kind=kind,
            # Refunded at the provider, the journal's charge still stands (its guard too): not
            # paid again here; the customer is told what was refunded, and by whom to ask.
            cancelled=bool(at_provider) and called_off,
            cancelled_at=ended["cancelled_at"] if at_provider else None,
        )
    if in_progress:  # a retry of a charge the provider could not take is on its way
        return Payment(
            invoice=invoice, state=PaymentState.UNKNOWN, amount=amount, currency=currency
        )
    refunded = charge.state == StepState.DONE  # done, and offset: refunded whole
    undone = _undone(charge, amount) if refunded else None
    outcome = charge.outcome if isinstance(charge.outcome, dict) else {}
    return Payment(
        invoice=invoice,
        state=PaymentState.NOT_DONE,
        amount=amount,
        currency=currency,
        refunded=refunded,
        paid_at=charge.settled_at if refunded else None,
        reference=_reference(charge) if refunded else "",
        refunded_at=undone[0] if undone else None,
        refunded_amount=undone[1] if undone else None,
        decline_code="" if refunded else str(outcome.get("code") or ""),
        declined_card="" if refunded else str(charge.args.get("payment_method") or ""),
        **ended,
    )


# How a receipt names a card's brand (Stripe's payment_method_details.card.brand).
CARD_BRANDS = {
    "visa": "Visa",
    "mastercard": "Mastercard",
    "amex": "American Express",
    "discover": "Discover",
    "diners": "Diners Club",
    "jcb": "JCB",
    "unionpay": "UnionPay",
    "cartes_bancaires": "Cartes Bancaires",
}


def card_text(evidence: Any) -> str:
    """``Visa ending 4242``, from a charge's evidence (commerce/tools/payments.py keeps the
    card's brand and last four digits); empty when the evidence does not say them."""
    if not isinstance(evidence, dict):
        return ""
    brand, last4 = evidence.get("card_brand"), evidence.get("card_last4")
    if not isinstance(brand, str) or not brand or not isinstance(last4, str):
        return ""
    if len(last4) != 4 or not last4.isdigit():
        return ""
    named = CARD_BRANDS.get(brand, brand.replace("_", " ").title())
    return f"{named} ending {last4}"


def _reference(charge: Step) -> str:
    """The receipt reference the customer is told: the provider's charge (or payment)."""
    evidence = charge.evidence
    return str(evidence.get("charge") or evidence.get("payment_intent") or "")


def _undone(charge: Step, whole: Any) -> tuple[datetime | None, int | None]:
    """When the journal's undo of the charge (its refund) settled, and the amount it refunded
    (its evidence's; the charge's own, whole, when the evidence does not say)."""
    by = charge.offset_by_id
    undo = None if by is None else Step.objects.filter(pk=by).only("settled_at", "outcome").first()
    if undo is None:
        return None, whole if isinstance(whole, int) else None
    refunded = undo.evidence.get("amount")
    amount = refunded if isinstance(refunded, int) else whole
    return undo.settled_at, amount if isinstance(amount, int) else None


def _refunded_at_provider(charge: Step) -> tuple[datetime, int | None] | None:
    """The charge refunded at the provider without the journal's undo (its dashboard, its
    support), as the provider audit found it: when it was found and the amount refunded
    (``amount_refunded``, as commerce/audits.py lists a payment). None if it was not.
    A finding a person resolved still stands: the money was refunded either way."""
    found = (
        Finding.objects.filter(step_id=charge.pk, kind=FindingKind.OFFSET_UNKNOWN)
        .order_by("-found_at", "-id")
        .only("found_at", "provider_side")
        .first()
    )
    if found is None:
        return None
    side = found.provider_side if isinstance(found.provider_side, dict) else {}
    raw = side.get("raw") if isinstance(side.get("raw"), dict) else {}
    amount = raw.get("amount_refunded") if isinstance(raw, dict) else None
    return found.found_at, amount if isinstance(amount, int) and amount > 0 else None
