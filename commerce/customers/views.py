"""The customer's payment page: open to anyone holding the signed link, and to nobody else.

No operator data, no internal ids, no stack traces. A tampered, expired or unbound link, or
an invoice nobody knows, is a page of its own (404) that says how to get a new link, and the
refusal is logged without the token.

An operator who opens the link while signed in sees it read-only: a retry from here would
be recorded as the customer's doing, so theirs is an action of its own on the task page
(its own permission, their name and reason)."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.views.decorators.http import require_http_methods
from django_htmx.http import HttpResponseStopPolling

from agentops.http import HtmxHttpRequest
from commerce.customers.links import Link, LinkProblem, link_of
from commerce.customers.selectors import PaymentState, payment_of
from commerce.customers.services import (
    CUSTOMER,
    LINK_ANSWER,
    TEST_CARDS,
    LinkThrottled,
    PaymentRefused,
    RetryThrottled,
    link_resend,
    payment_retry,
)

log = logging.getLogger(__name__)

OPERATOR_REFUSED = (
    "You are signed in as an operator: trying the payment again from the customer's page "
    "would be recorded as the customer's doing. Use “Retry payment” on the task page "
    "instead, where it is recorded with your name and reason."
)


def merchant() -> dict[str, str]:
    """Who the customer pays, and how to reach them (settings MERCHANT_*)."""
    return {
        "name": settings.MERCHANT_NAME,
        "email": settings.MERCHANT_EMAIL,
        "phone": settings.MERCHANT_PHONE,
    }


def test_mode() -> bool:
    """Whether the payments provider is in test mode (a test key: the sandbox, or Stripe's
    test mode), where the page offers the provider's test cards."""
    return settings.STRIPE_API_KEY.startswith(("sk_test_", "rk_test_"))


def link_refused(request: HtmxHttpRequest, link: Link) -> HttpResponse:
    """The page for a link that opens no payment: what happened, and how to get a new one —
    from an expired link, a button that has one sent to the address on file (the answer
    the same whether there is one or not)."""
    log.warning(
        "refused: a customer link (%s%s)",
        link.problem,
        f", invoice {link.invoice}" if link.invoice else "",
    )
    context: dict[str, Any] = {
        "problem": str(link.problem),
        "invoice": link.invoice,
        "merchant": merchant(),
        "resendable": link.problem == LinkProblem.EXPIRED and bool(link.task_id),
    }
    status, retry_after = 404, 0
    # Only the page's own button asks (a card sent from an old page is not a request).
    if request.method == "POST" and request.POST.get("new_link") and context["resendable"]:
        try:
            link_resend(invoice=link.invoice, task_id=link.task_id)
        except LinkThrottled as exc:
            log.warning("throttled: fresh links for %s", link.invoice)
            context.update(refused=LinkThrottled.SENTENCE, retry_at=exc.shown_at)
            status, retry_after = 429, exc.retry_after
        else:
            context["sent"] = LINK_ANSWER
            status = 200
    response = render(request, "customers/link_refused.html", context, status=status)
    if retry_after:
        response["Retry-After"] = str(retry_after)
    return response


@login_not_required
@require_http_methods(["GET", "POST"])
def payment(request: HtmxHttpRequest, token: str) -> HttpResponse:
    link = link_of(token)
    if link.problem:
        return link_refused(request, link)
    found = payment_of(invoice=link.invoice)
    if found is None:
        return link_refused(request, Link(link.invoice, link.task_id, LinkProblem.UNKNOWN))
    operator = request.user.is_authenticated
    refused, status, retry_at, retry_after = "", 200, None, 0
    card = ""
    if request.method == "POST":
        card = request.POST.get("payment_method", "").strip()
        if operator:
            log.warning(
                "refused: operator %s posted the customer's retry of %s; told to use the task page",
                request.user.get_username(),
                link.invoice,
            )
            refused, status = OPERATOR_REFUSED, 403
        else:
            try:
                payment_retry(invoice=link.invoice, actor=CUSTOMER, payment_method=card)
            except RetryThrottled as exc:
                log.warning("throttled: the customer's retry of %s", link.invoice)
                refused, status = RetryThrottled.SENTENCE, 429
                retry_at, retry_after = exc.shown_at, exc.retry_after
            except PaymentRefused as exc:
                log.warning("refused: the customer's payment of %s: %s", link.invoice, exc)
                refused, status = str(exc), 409
            else:
                return HttpResponseRedirect(request.path)
        found = payment_of(invoice=link.invoice) or found
    context: dict[str, Any] = {
        "payment": found,
        "refused": refused,
        "retry_at": retry_at,
        "operator": operator,
        "merchant": merchant(),
        "test_cards": TEST_CARDS if test_mode() else (),
        "card": card,
    }
    if request.htmx and request.method == "GET":  # the page polling itself
        response = render(request, "customers/payment.html#state", context)
        if found.state == PaymentState.UNKNOWN:
            return response
        stopped = HttpResponseStopPolling(response.content)
        stopped["Content-Type"] = response["Content-Type"]
        return stopped
    response = render(request, "customers/payment.html", context, status=status)
    if retry_after:
        response["Retry-After"] = str(retry_after)
    return response
