"""An invoice's payment as its customer sees it: done, not done, or unknown — never two."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

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
    retryable: bool = False

    @property
    def amount_text(self) -> str:
        if self.amount is None:
            return ""
        return money_text(self.amount, self.currency)


def payment_of(*, invoice: str) -> Payment | None:
    """The state of the invoice's payment, from the journal; None when no task knows it."""
    try:
        charged = object_key(f"charge:{invoice}")  # the guards' own normal form
    except UnsafeName:
        return None
    tasks = Task.objects.filter(
        Q(refs__invoice__iexact=invoice) | Q(steps__guard_key=charged)
    ).distinct()
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
    if charge is None:
        state = PaymentState.UNKNOWN if in_progress else PaymentState.NOT_DONE
        return Payment(invoice=invoice, state=state, retryable=retryable)
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
    return Payment(
        invoice=invoice,
        state=PaymentState.NOT_DONE,
        amount=amount,
        currency=currency,
        refunded=charge.state == StepState.DONE,
        retryable=retryable,
    )
