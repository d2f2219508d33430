"""The customer's link to an invoice's payment page: unguessable, signed, expiring.

The link carries the invoice, signed with the app's secret (Django signing, its own salt)
and timestamped; nothing sequential, nothing internal. A tampered or expired link is not a
page (404)."""

from __future__ import annotations

from django.conf import settings
from django.core import signing
from django.urls import reverse

SALT = "commerce.customers.payment"


def payment_token(invoice: str) -> str:
    return signing.dumps({"invoice": invoice}, salt=SALT, compress=True)


def payment_link(invoice: str) -> str:
    """The path of the invoice's payment page (build an absolute URI from the request)."""
    return reverse("customers:payment", args=[payment_token(invoice)])


def invoice_of(token: str) -> str | None:
    """The invoice a genuine, unexpired token names; None otherwise."""
    try:
        data = signing.loads(
            token, salt=SALT, max_age=settings.CUSTOMER_LINK_MAX_AGE_DAYS * 24 * 3600
        )
    except signing.BadSignature:  # includes SignatureExpired
        return None
    invoice = data.get("invoice") if isinstance(data, dict) else None
    return invoice if isinstance(invoice, str) and invoice else None
