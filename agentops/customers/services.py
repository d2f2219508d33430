"""What a customer may do: try a payment again, only when it certainly did not happen."""

from __future__ import annotations

from django.db import connection, transaction

from agentops.customers.selectors import PaymentState, payment_of
from agentops.runner import task_start
from journal.models import Task


class PaymentRefused(Exception):
    """Not now: the payment happened, or may have; paying again could charge twice."""


def payment_retry(*, invoice: str) -> Task:
    """Start a new attempt at paying the invoice, through the harness, as its last renewal
    asked. Refused unless the payment is certainly not done — checked here, on the server,
    under a lock on the invoice, so two tabs or two devices cannot both start one (and the
    journal's guards would refuse a second charge anyway)."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"pay:{invoice.lower()}"])
        payment = payment_of(invoice=invoice)
        if payment is None or payment.state != PaymentState.NOT_DONE:
            raise PaymentRefused(
                "Your payment has gone through, or is being checked: please do not pay again."
            )
        last = (
            Task.objects.filter(kind="renewal", refs__invoice__iexact=invoice)
            .order_by("-created_at")
            .first()
        )
        if last is None or not payment.retryable:
            raise PaymentRefused("This payment cannot be tried again online; please contact us.")
        return task_start(
            kind="renewal",
            goal=f"The customer tried paying {invoice} again from the payment page",
            refs=dict(last.refs),
            actor="customer",
        )
