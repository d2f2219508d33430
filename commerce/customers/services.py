"""Trying a payment again, only when it certainly did not happen: by the customer at their
link (a few times per window), or by an operator from the task page (with their name and
reason). One path for both, so both are checked alike."""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models.functions import Now
from django.utils import timezone

from agentops.effects import EntryKind, Task, task_note, task_start
from commerce.customers.dates import date_text
from commerce.customers.links import LINK_KIND
from commerce.customers.selectors import Payment, PaymentState, payment_of

# Who a retry from the payment page is recorded as: the link is a bearer token, and whoever
# holds it is, to us, the customer. An operator's retry carries their username instead.
CUSTOMER = "customer"
# The entry's action when the customer's card was refused (recorded, and counted as a try).
CARD_REFUSED = "pay_with_card_refused"
# A card token as the renewal's references take it (commerce.kinds.PAYMENT_METHOD); \Z, not
# $, which would let a trailing newline through.
CARD_TOKEN = re.compile(r"pm_[A-Za-z0-9_]{1,100}\Z")
# In test mode (a test key: the sandbox, or Stripe's own test mode) the page offers the
# provider's test cards, as Stripe documents them; with a live key, Stripe.js makes the token.
TEST_CARDS = (
    ("pm_card_visa", "Visa ending 4242"),
    ("pm_card_mastercard", "Mastercard ending 4444"),
    ("pm_card_amex", "American Express ending 8431"),
    ("pm_card_chargeDeclinedInsufficientFunds", "Visa ending 9995 (test: declined, no funds)"),
)


class PaymentRefused(Exception):
    """Not now: the payment happened, or may have; paying again could charge twice.

    ``str()`` is the sentence for the customer; ``operator`` the one for the task page."""

    def __init__(self, message: str, *, operator: str = "") -> None:
        super().__init__(message)
        self.operator = operator or message


class _Throttled:
    """Asked too often in a short while: nothing was done, and may be asked again after
    ``retry_at``. Its ``SENTENCE`` ends with that time, rounded up to the minute, so "after
    14:06" is never a minute early (the page writes the time itself, in the reader's order
    and zone: customer_time)."""

    SENTENCE = ""
    retry_at: datetime
    shown_at: datetime

    def _told(self, retry_at: datetime) -> str:
        shown = (retry_at + timedelta(seconds=59)).replace(second=0, microsecond=0)
        self.retry_at, self.shown_at = retry_at, shown
        return f"{self.SENTENCE} {date_text(shown, order='dmy')}."

    @property
    def retry_after(self) -> int:
        """Seconds until it may be asked again (the Retry-After header)."""
        return max(1, math.ceil((self.retry_at - timezone.now()).total_seconds()))


class RetryThrottled(_Throttled, PaymentRefused):
    """The customer tried too often in a short while; nothing was started."""

    SENTENCE = (
        "You have tried to pay several times in a short while, so nothing was started. "
        "Please try again after"
    )

    def __init__(self, *, retry_at: datetime) -> None:
        super().__init__(self._told(retry_at))


def payment_retry(*, invoice: str, actor: str, reason: str = "", payment_method: str = "") -> Task:
    """Start a new attempt at paying the invoice, through the harness; ``actor`` is
    :data:`CUSTOMER` with the ``payment_method`` they chose (another card), or an operator's
    username with ``reason``, why (the card of the last renewal).

    Refused unless the payment is certainly not done — checked here, on the server, under a
    lock on the invoice, so two tabs, two devices, a double click, or a customer and an
    operator cannot both start one (and the journal's guards would refuse a second charge
    anyway: the new renewal's charge is a keyed step guarded by its invoice). The customer's
    card is untrusted text: one that is not a card token, or is the card just declined, is
    refused with a sentence and the refusal recorded on the invoice's last renewal. The
    customer's tries, started or refused, are counted under that lock
    (``CUSTOMER_RETRY_LIMIT`` per ``CUSTOMER_RETRY_WINDOW_SECONDS``): no race lets one more
    through. An operator's retry is recorded on the new task with who and why."""
    why = reason.strip()[:2000]
    if actor != CUSTOMER and not why:
        raise PaymentRefused("", operator="Say why: the journal records every operator's reason.")
    refused: PaymentRefused | None = None
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
        if payment.cancelled:
            raise PaymentRefused(
                "This was cancelled, so nothing is owed and nothing can be paid here.",
                operator=f"Not started: the latest task for {invoice} was cancelled.",
            )
        if last is None or not payment.retryable:
            raise PaymentRefused(
                "This payment cannot be tried again online; please contact us.",
                operator=f"Not started: no renewal of {invoice} to try again.",
            )
        refs = dict(last.refs)
        if actor == CUSTOMER:
            _customer_within_limit(invoice)
            problem = card_problem(payment_method, declined=payment)
            if problem:
                # Recorded (and counted) on the renewal the customer's link is about, then
                # refused once this block has committed the record.
                task_note(
                    task_id=last.pk,
                    actor=CUSTOMER,
                    action=CARD_REFUSED,
                    data={"reason": problem, "payment_method": payment_method[:120]},
                )
                refused = PaymentRefused(problem)
            else:
                refs["payment_method"] = payment_method
                goal = f"The customer paid {invoice} with another card from the payment page"
        else:
            goal = f"{actor} (an operator) tried paying {invoice} again from the task page"
        if refused is None:
            task = task_start(kind="renewal", goal=goal, refs=refs, actor=actor)
        if refused is None and actor != CUSTOMER:
            task_note(
                task_id=task.pk,
                actor=actor,
                action="retry_payment",
                data={"reason": why, "after": str(last.pk)},
            )
    if refused is not None:
        raise refused
    return task


def card_problem(payment_method: str, *, declined: Payment) -> str:
    """Why the customer's card cannot be charged, as a sentence for them; empty when it can.

    ``payment_method`` comes from the browser: a token that Stripe.js (or, in test mode, the
    page's list of test cards) makes for the card, ``pm_…``. The card just declined is never
    charged again, unless the bank's reason was passing (a processing error)."""
    if not payment_method:
        return "Please choose the card to pay with."
    if not CARD_TOKEN.fullmatch(payment_method):
        return (
            "That is not a card we can charge: the card field takes a card token such as "
            "pm_card_visa. Nothing was charged."
        )
    if payment_method == declined.declined_card and not declined.decline.same_card:
        return (
            "That is the card that was just declined. Please pay with another card. "
            "Nothing was charged."
        )
    return ""


def _customer_within_limit(invoice: str) -> None:
    """Raise :class:`RetryThrottled` when the customer already tried the limit's worth of
    times to pay this invoice within the window: renewals they started, and cards of theirs
    refused. Those records are the counter (their times are the database's clock): no table
    of its own, nothing in Redis, and the caller's lock on the invoice makes count-then-start
    atomic. So a refused card, recorded each time, cannot be sent without end either."""
    limit = max(1, settings.CUSTOMER_RETRY_LIMIT)
    window = timedelta(seconds=settings.CUSTOMER_RETRY_WINDOW_SECONDS)
    renewals = Task.objects.filter(kind="renewal", refs__invoice__iexact=invoice)
    started = (
        renewals.filter(
            created_at__gt=Now() - window,
            entries__kind=EntryKind.TASK_CREATED,
            entries__actor=CUSTOMER,
        )
        .order_by("-created_at")
        .values_list("created_at", flat=True)[:limit]
    )
    refused = (
        renewals.filter(
            entries__kind=EntryKind.OPERATOR_ACTION,
            entries__actor=CUSTOMER,
            entries__data__action=CARD_REFUSED,
            entries__at__gt=Now() - window,
        )
        .order_by("-entries__at")
        .values_list("entries__at", flat=True)[:limit]
    )
    recent = sorted([*started, *refused], reverse=True)[:limit]
    if len(recent) >= limit:
        # When the oldest of these leaves the window, one more fits.
        raise RetryThrottled(retry_at=recent[-1] + window)


# --- A fresh link, from an expired one ---------------------------------------------------------

# The entry's action when someone holding an expired link asked for a fresh one.
LINK_REQUESTED = "new_link_requested"
# How many fresh links one invoice's expired links may ask for in LINK_WINDOW (sent or not):
# enough for a customer who lost one, too few to make the address on file a mailbox to flood.
LINK_LIMIT = 3
LINK_WINDOW = timedelta(hours=1)
# The same answer whatever happened: it tells nobody whether there is an address on file.
LINK_ANSWER = (
    "If we have an email address for this payment, a new link is on its way to it. It may "
    "take a few minutes; check your spam folder too."
)


class LinkThrottled(_Throttled, Exception):
    """Too many fresh links were asked for this invoice lately; nothing was sent."""

    SENTENCE = (
        "A new link for this payment was asked for several times in a short while, so "
        "nothing more was sent. Please use the most recent email, or try again after"
    )

    def __init__(self, *, retry_at: datetime) -> None:
        super().__init__(self._told(retry_at))


def link_resend(*, invoice: str, task_id: str) -> None:
    """Someone holding an expired link to ``invoice``'s page, bound to ``task_id``, asks for
    a fresh one: it goes only to the address on file (the task's), never to one they give,
    by a task of its own (``customer_link``: a keyed email, the harness adding the link).
    Each request is recorded on the task (who: the customer; counted under a lock on the
    invoice, :class:`LinkThrottled` past ``LINK_LIMIT`` per ``LINK_WINDOW``). A task that no
    longer exists, or names another invoice, sends nothing and records nothing — and the
    caller answers the same either way (``LINK_ANSWER``)."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"pay:{invoice.lower()}"])
        try:
            task = Task.objects.filter(pk=task_id).only("refs", "kind").first()
        except ValidationError:
            task = None
        refs = task.refs if task is not None and isinstance(task.refs, dict) else {}
        email = refs.get("email")
        if task is None or str(refs.get("invoice", "")).casefold() != invoice.casefold():
            return
        asked = list(
            Task.objects.filter(refs__invoice__iexact=invoice)
            .filter(
                entries__kind=EntryKind.OPERATOR_ACTION,
                entries__actor=CUSTOMER,
                entries__data__action=LINK_REQUESTED,
                entries__at__gt=Now() - LINK_WINDOW,
            )
            .order_by("-entries__at")
            .values_list("entries__at", flat=True)[:LINK_LIMIT]
        )
        if len(asked) >= LINK_LIMIT:
            raise LinkThrottled(retry_at=asked[-1] + LINK_WINDOW)
        task_note(
            task_id=task.pk,
            actor=CUSTOMER,
            action=LINK_REQUESTED,
            data={"reason": "asked for a fresh link from an expired one", "sent": bool(email)},
        )
        if isinstance(email, str) and email:
            task_start(
                kind=LINK_KIND,
                goal=f"The customer asked for a fresh link to the payment page of {invoice}",
                refs={"invoice": refs["invoice"], "email": email},
                actor=CUSTOMER,
            )
