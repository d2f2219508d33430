"""The customer's payment page: open to anyone holding the signed link, and to nobody else.

No operator data, no internal ids, no stack traces: a tampered or expired link, or an
invoice nobody knows, is a plain 404."""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.views.decorators.http import require_http_methods
from django_htmx.http import HttpResponseStopPolling

from agentops.customers.links import invoice_of
from agentops.customers.selectors import PaymentState, payment_of
from agentops.customers.services import PaymentRefused, payment_retry
from agentops.http import HtmxHttpRequest


@login_not_required
@require_http_methods(["GET", "POST"])
def payment(request: HtmxHttpRequest, token: str) -> HttpResponse:
    invoice = invoice_of(token)
    found = payment_of(invoice=invoice) if invoice else None
    if invoice is None or found is None:
        raise Http404("no such payment")
    refused = ""
    if request.method == "POST":
        try:
            payment_retry(invoice=invoice)
        except PaymentRefused as exc:
            refused = str(exc)
        else:
            return HttpResponseRedirect(request.path)
        found = payment_of(invoice=invoice) or found
    context = {"payment": found, "refused": refused}
    if request.htmx:
        response = render(request, "customers/payment.html#state", context)
        if found.state == PaymentState.UNKNOWN:
            return response
        stopped = HttpResponseStopPolling(response.content)
        stopped["Content-Type"] = response["Content-Type"]
        return stopped
    return render(request, "customers/payment.html", context, status=409 if refused else 200)
