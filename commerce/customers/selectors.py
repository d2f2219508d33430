"""An invoice's payment as its customer sees it: done, not done, or unknown — never two."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from django.db.models import Q

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

# A task's ends that call its payment off (an operator's cancel, a saga undone).
CALLED_OFF = ("cancelled", "compensated")


class PaymentState(StrEnum):
    DONE = "done"
    NOT_DONE = "not_done"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Payment:
    invoice: str
    state: PaymentState
    amount: int | None = None
    currency: str = ""
    paid_at: datetime | None = None
    reference: str = ""
    next_check_at: datetime | None = None
    refunded: bool = False
    refunded_at: datetime | None = None
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

    @property
    def amount_text(self) -> str:
        if self.amount is None:
            return ""
        return money_text(self.amount, self.currency)

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
    tasks = Task.objects.filter(
        Q(refs__invoice__iexact=invoice)
        | Q(pk__in=Step.objects.filter(guard_key=charged).values("task_id"))
    )
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
        evidence = charge.evidence
        return Payment(
            invoice=invoice,
            state=PaymentState.DONE,
            amount=amount,
            currency=currency,
            paid_at=charge.settled_at,
            reference=str(evidence.get("charge") or evidence.get("payment_intent") or ""),
        )
    if in_progress:  # a retry of a charge the provider could not take is on its way
        return Payment(
            invoice=invoice, state=PaymentState.UNKNOWN, amount=amount, currency=currency
        )
    refunded = charge.state == StepState.DONE  # done, and offset: refunded whole
    outcome = charge.outcome if isinstance(charge.outcome, dict) else {}
    return Payment(
        invoice=invoice,
        state=PaymentState.NOT_DONE,
        amount=amount,
        currency=currency,
        refunded=refunded,
        refunded_at=_undone_at(charge) if refunded else None,
        decline_code="" if refunded else str(outcome.get("code") or ""),
        declined_card="" if refunded else str(charge.args.get("payment_method") or ""),
        **ended,
    )


def _undone_at(charge: Step) -> datetime | None:
    if charge.offset_by_id is None:
        return None
    undo = Step.objects.filter(pk=charge.offset_by_id).values_list("settled_at", flat=True)
    return undo.first()
