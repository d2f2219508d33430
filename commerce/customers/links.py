"""The customer's link to an invoice's payment page: unguessable, signed, expiring, and bound
to the task that sent it.

The link carries the invoice and the task whose email (or page) gave it, signed with the
app's secret (Django signing, its own salt) and timestamped; nothing sequential, nothing
internal in clear. A tampered, expired or unbound link is not a payment page: the customer is
shown a page that says how to get a new link (``views.link_refused``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.core import signing
from django.core.exceptions import ValidationError
from django.urls import reverse

from agentops.effects import Task, TaskFacts

SALT = "commerce.customers.payment"


def payment_token(invoice: str, task: Any = None) -> str:
    """The signed token of ``invoice``'s page; ``task`` (a task or its id) binds it to the
    task that hands it out, whose references must name the invoice."""
    data: dict[str, str] = {"invoice": invoice}
    if task is not None:
        data["task"] = str(getattr(task, "pk", task))
    return signing.dumps(data, salt=SALT, compress=True)


def payment_link(invoice: str, task: Any = None) -> str:
    """The path of the invoice's payment page (build an absolute URI from the request)."""
    return reverse("customers:payment", args=[payment_token(invoice, task)])


def payment_url(invoice: str, task: Any) -> str:
    """The address of the invoice's payment page for an email: ``CUSTOMER_BASE_URL`` (by
    default ``AGENTOPS_BASE_URL``) before the path; the path alone when neither is set."""
    base = settings.CUSTOMER_BASE_URL or settings.AGENTOPS_BASE_URL
    return f"{base.rstrip('/')}{payment_link(invoice, task)}"


class LinkProblem(StrEnum):
    """Why a link opens no payment page; each has its own words for the customer."""

    EXPIRED = "expired"
    """Genuine, but older than ``CUSTOMER_LINK_MAX_AGE_DAYS``."""
    BROKEN = "broken"
    """Not signed by us: cut short when copied, mistyped, or forged."""
    UNKNOWN = "unknown"
    """Signed by us, but no task (any more) names its invoice: nothing to show."""


@dataclass(frozen=True)
class Link:
    """What a link names, once checked: ``problem`` is empty for a link to open."""

    invoice: str = ""
    task_id: str = ""
    problem: LinkProblem | None = None


def _payload(data: Any) -> tuple[str, str] | None:
    if not isinstance(data, dict):
        return None
    invoice, task = data.get("invoice"), data.get("task", "")
    if not isinstance(invoice, str) or not invoice or not isinstance(task, str):
        return None
    return invoice, task


def link_of(token: str) -> Link:
    """The invoice and task a genuine, unexpired token names, bound as they were signed: a
    task it names must exist and name the invoice in its references."""
    max_age = settings.CUSTOMER_LINK_MAX_AGE_DAYS * 24 * 3600
    try:
        named = _payload(signing.loads(token, salt=SALT, max_age=max_age))
    except signing.SignatureExpired:
        old = _payload(signing.loads(token, salt=SALT))  # genuine: only its age is wrong
        return Link(*(old or ("", "")), problem=LinkProblem.EXPIRED)
    except signing.BadSignature:
        return Link(problem=LinkProblem.BROKEN)
    if named is None:
        return Link(problem=LinkProblem.BROKEN)
    invoice, task_id = named
    if task_id and not _task_names(task_id, invoice):
        return Link(invoice, task_id, LinkProblem.UNKNOWN)
    return Link(invoice, task_id)


def _task_names(task_id: str, invoice: str) -> bool:
    try:
        task = Task.objects.filter(pk=task_id).only("refs").first()
    except ValidationError:  # not a task id: we never signed it
        return False
    refs = task.refs if task is not None and isinstance(task.refs, dict) else {}
    return str(refs.get("invoice", "")).casefold() == invoice.casefold()


def invoice_of(token: str) -> str | None:
    """The invoice a genuine, unexpired, bound token names; None otherwise."""
    link = link_of(token)
    return None if link.problem else link.invoice


# --- The link in the customer's emails ------------------------------------------------------

# What the paragraph that ends each email the page is about says, by the email's purpose.
# The kind of a task that only emails a customer a fresh link to their page, which they asked
# for from an expired one (commerce/kinds.py, commerce/customers/services.py): it says nothing
# of the payment, and the page does not count it.
LINK_KIND = "customer_link"
# The kind of a task that only tells a customer what happened to their payment when no task
# of it will run again: an operator cancelled it outright, or the provider audit found it
# refunded at the provider (commerce/kinds.py). The page does not count it either.
NOTICE_KIND = "customer_notice"
MESSAGE_KINDS = (LINK_KIND, NOTICE_KIND)

EMAIL_LINKS = {
    "receipt": "Your receipt: {url}",
    "payment_failed": "Pay with another card: {url}",
    "itinerary": "Your payment and trip: {url}",
    "notice": "Your trip and its payment: {url}",
    "cancellation": "The cancelled trip and its payment: {url}",
    "refund": "Your payment and its refund: {url}",
    "link": "Your payment page: {url}",
}
TOKEN_IN_TEXT = re.compile(r"/pay/(?P<token>[^/\s]+)/")


def carries_link(text: str, invoice: str, task_id: str) -> bool:
    """Whether ``text`` has a genuine, unexpired link to ``invoice``'s page bound to the task."""
    for found in TOKEN_IN_TEXT.finditer(text):
        link = link_of(found.group("token"))
        if link.problem is None and (link.invoice, link.task_id) == (invoice, str(task_id)):
            return True
    return False


def email_link(facts: TaskFacts, args: Mapping[str, Any]) -> str | None:
    """The paragraph the harness ends a customer's email with (``agentops.effects.Append``,
    commerce/kinds.py): the invoice's page, bound to this task, whichever planner wrote the
    email; a model is not trusted to copy a signed link. None for an email the page is not
    about, or one that carries a genuine link to it already (the same email decided again)."""
    says = EMAIL_LINKS.get(str(args.get("purpose")))
    invoice = facts.refs.get("invoice")
    if says is None or not isinstance(invoice, str) or not invoice:
        return None
    body = args.get("body")
    if isinstance(body, str) and carries_link(body, invoice, facts.task_id):
        return None
    return says.format(url=payment_url(invoice, facts.task_id))
