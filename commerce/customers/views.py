"""The customer's payment page: open to anyone holding the signed link, and to nobody else.

No operator data, no internal ids, no stack traces: a tampered or expired link, or an
invoice nobody knows, is a plain 404.

An operator who opens the link while signed in sees it read-only: a retry from here would
be recorded as the customer's doing, so theirs is an action of its own on the task page
(its own permission, their name and reason)."""

from __future__ import annotations

import logging

from django.contrib.auth.decorators import login_not_required
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.views.decorators.http import require_http_methods
from django_htmx.http import HttpResponseStopPolling

from agentops.http import HtmxHttpRequest
from commerce.customers.links import invoice_of
from commerce.customers.selectors import PaymentState, payment_of
from commerce.customers.services import CUSTOMER, PaymentRefused, RetryThrottled, payment_retry

log = logging.getLogger(__name__)

OPERATOR_REFUSED = (
    "You are signed in as an operator: trying the payment again from the customer's page "
    "would be recorded as the customer's doing. Use “Retry payment” on the task page "
    "instead, where it is recorded with your name and reason."
)


@login_not_required
@require_http_methods(["GET", "POST"])
def payment(request: HtmxHttpRequest, token: str) -> HttpResponse:
    invoice = invoice_of(token)
    found = payment_of(invoice=invoice) if invoice else None
    if invoice is None or found is None:
        raise Http404("no such payment")
    operator = request.user.is_authenticated
    refused, status, retry_after = "", 200, 0
    if request.method == "POST":
        if operator:
            log.warning(
                "refused: operator %s posted the customer's retry of %s; told to use the task page",
                request.user.get_username(),
                invoice,
            )
            refused, status = OPERATOR_REFUSED, 403
        else:
            try:
                payment_retry(invoice=invoice, actor=CUSTOMER)
            except RetryThrottled as exc:
                log.warning("throttled: the customer's retry of %s", invoice)
                refused, status, retry_after = str(exc), 429, exc.retry_after
            except PaymentRefused as exc:
                refused, status = str(exc), 409
            else:
                return HttpResponseRedirect(request.path)
        found = payment_of(invoice=invoice) or found
    context = {"payment": found, "refused": refused, "operator": operator}
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
