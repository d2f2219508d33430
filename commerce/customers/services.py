"""Trying a payment again, only when it certainly did not happen: by the customer at their
link (a few times per window), or by an operator from the task page (with their name and
reason). One path for both, so both are checked alike."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import Now
from django.utils import timezone

from agentops.effects import EntryKind, Task, entries_add, entry, task_start
from commerce.customers.selectors import PaymentState, payment_of

# Who a retry from the payment page is recorded as: the link is a bearer token, and whoever
# holds it is, to us, the customer. An operator's retry carries their username instead.
CUSTOMER = "customer"


class PaymentRefused(Exception):
    """Not now: the payment happened, or may have; paying again could charge twice.

    ``str()`` is the sentence for the customer; ``operator`` the one for the task page."""

    def __init__(self, message: str, *, operator: str = "") -> None:
        super().__init__(message)
        self.operator = operator or message


class RetryThrottled(PaymentRefused):
    """The customer tried too often in a short while; nothing was started."""

    def __init__(self, *, retry_at: datetime) -> None:
        # Rounded up to the minute, so "after 14:06" is never a minute early.
        shown = (retry_at + timedelta(seconds=59)).replace(second=0, microsecond=0)
        super().__init__(
            "You have tried to pay several times in a short while, so nothing was started. "
            f"Please try again after {shown:%H:%M} UTC on {shown.day} {shown:%B}."
        )
        self.retry_at = retry_at

    @property
    def retry_after(self) -> int:
        """Seconds until a retry may be accepted again (the Retry-After header)."""
        return max(1, math.ceil((self.retry_at - timezone.now()).total_seconds()))


def payment_retry(*, invoice: str, actor: str, reason: str = "") -> Task:
    """Start a new attempt at paying the invoice, through the harness, as its last renewal
    asked; ``actor`` is :data:`CUSTOMER`, or an operator's username with ``reason``, why.

    Refused unless the payment is certainly not done — checked here, on the server, under a
    lock on the invoice, so two tabs, two devices, or a customer and an operator cannot both
    start one (and the journal's guards would refuse a second charge anyway). The customer's
    retries are also counted under that lock (``CUSTOMER_RETRY_LIMIT`` per
    ``CUSTOMER_RETRY_WINDOW_SECONDS``): no race lets one more through. An operator's retry
    is recorded on the new task with who and why."""
    why = reason.strip()[:2000]
    if actor != CUSTOMER and not why:
        raise PaymentRefused("", operator="Say why: the journal records every operator's reason.")
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"pay:{invoice.lower()}"])
        payment = payment_of(invoice=invoice)
        if payment is None or payment.state != PaymentState.NOT_DONE:
            raise PaymentRefused(
                "Your payment has gone through, or is being checked: please do not pay again.",
                operator=f"Not started: the payment of {invoice} is done, or may be, or a task "
                "for it is still in progress. Its tasks' pages say which.",
            )
        last = (
            Task.objects.filter(kind="renewal", refs__invoice__iexact=invoice)
            .order_by("-created_at")
            .first()
        )
        if last is None or not payment.retryable:
            raise PaymentRefused(
                "This payment cannot be tried again online; please contact us.",
                operator=f"Not started: no renewal of {invoice} to try again.",
            )
        if actor == CUSTOMER:
            _customer_within_limit(invoice)
            goal = f"The customer tried paying {invoice} again from the payment page"
        else:
            goal = f"{actor} (an operator) tried paying {invoice} again from the task page"
        task = task_start(kind="renewal", goal=goal, refs=dict(last.refs), actor=actor)
        if actor != CUSTOMER:
            entries_add(
                entry(
                    kind=EntryKind.OPERATOR_ACTION,
                    task_id=task.pk,
                    actor=actor,
                    action="retry_payment",
                    reason=why,
                    after=str(last.pk),
                )
            )
        return task


def _customer_within_limit(invoice: str) -> None:
    """Raise :class:`RetryThrottled` when the customer already started the limit's worth of
    renewals of this invoice within the window. The renewals themselves are the counter
    (their creation time is the database's clock): no table of its own, nothing in Redis,
    and the caller's lock on the invoice makes count-then-start atomic."""
    limit = max(1, settings.CUSTOMER_RETRY_LIMIT)
    window = timedelta(seconds=settings.CUSTOMER_RETRY_WINDOW_SECONDS)
    recent = list(
        Task.objects.filter(
            kind="renewal",
            refs__invoice__iexact=invoice,
            created_at__gt=Now() - window,
            entries__kind=EntryKind.TASK_CREATED,
            entries__actor=CUSTOMER,
        )
        .order_by("-created_at")
        .values_list("created_at", flat=True)[:limit]
    )
    if len(recent) >= limit:
        # When the oldest of these leaves the window, one more fits.
        raise RetryThrottled(retry_at=recent[-1] + window)
