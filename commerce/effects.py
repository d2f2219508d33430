"""What the shipped kinds give agentops, through its public API (``agentops.effects``): their
tools, kinds, intents (served over MCP) and playbooks, how their providers' effects are listed
for the provider audit, the sandbox providers that stand in for Stripe, a mail API and a
bookings API, the customer's payment page and Stripe's webhook, the task page's link to
the customer's page and its "Retry payment" action, and the demo's tasks (``make run``)."""

from __future__ import annotations

from typing import Any

from agentops import effects
from commerce import playbooks
from commerce.audits import AUDITS
from commerce.customers.links import LINK_KIND, NOTICE_KIND, payment_link
from commerce.customers.selectors import PaymentState, payment_of
from commerce.customers.services import PaymentRefused, payment_retry
from commerce.demo import DEMO_TASKS
from commerce.intents import INTENTS
from commerce.kinds import KINDS
from commerce.tools.bookings import BookHotel, CancelHotel, HoldFlight, ReleaseFlight
from commerce.tools.email import SendEmail
from commerce.tools.invoices import LookUpInvoice
from commerce.tools.payments import ChargeCustomer, RefundCharge

for tool in (
    ChargeCustomer,
    RefundCharge,
    SendEmail,
    HoldFlight,
    ReleaseFlight,
    BookHotel,
    CancelHotel,
    LookUpInvoice,
):
    effects.register_tool(tool)

for kind in KINDS:
    effects.register_kind(kind)

# Served over MCP (manage.py mcp_server): "the charge for this invoice", "reminder N of it".
for intent in INTENTS:
    effects.register_intent(intent)

# The provider audit (docs/operating/audit.md): how each provider lists our effects.
for audit in AUDITS:
    effects.register_audit(audit)

effects.register_playbook("renewal")(playbooks.renewal)
effects.register_playbook("trip")(playbooks.trip)
effects.register_playbook("reminders")(playbooks.reminders)
effects.register_playbook(LINK_KIND)(playbooks.customer_link)
effects.register_playbook(NOTICE_KIND)(playbooks.customer_notice)

DEMO_INVOICES = (
    "INV-3001:4900:usd:ada@example.com",
    "INV-3002:12900:eur:grace@example.com",
    "INV-2101:2500:usd:edsger@example.com",
    "INV-2102:7500:usd:barbara@example.com",
)

effects.register_sandbox(
    effects.Sandbox(
        name="payments",
        module="sandbox.payments",
        port=8101,
        port_setting="AGENTOPS_SANDBOX_PAYMENTS_PORT",
        unless="STRIPE_API_KEY",
        # Stripe's search trails its writes; the sandbox's does too, a little.
        args=(
            "--webhook-url",
            "{web}/webhooks/stripe",
            "--search-lag",
            "2",
            # Open invoices in the system of record, for an agent to charge or remind over
            # MCP (docs/mcp.md).
            *(f"--invoice={spec}" for spec in DEMO_INVOICES),
        ),
        settings={
            "STRIPE_API_KEY": "sk_test_agentops_sandbox",
            "STRIPE_API_BASE": "{url}",
            "STRIPE_WEBHOOK_SECRET": "{secret}",
        },
        defaults={"STRIPE_SEARCH_LAG_SECONDS": "5"},
    )
)
effects.register_sandbox(
    effects.Sandbox(
        name="mail",
        module="sandbox.mail",
        port=8102,
        port_setting="AGENTOPS_SANDBOX_MAIL_PORT",
        unless="MAIL_API_BASE",
        settings={"MAIL_API_BASE": "{url}"},
    )
)
effects.register_sandbox(
    effects.Sandbox(
        name="bookings",
        module="sandbox.bookings",
        port=8103,
        port_setting="AGENTOPS_SANDBOX_BOOKINGS_PORT",
        unless="BOOKINGS_API_BASE",
        settings={"BOOKINGS_API_BASE": "{url}"},
    )
)

effects.register_demo(*DEMO_TASKS)

effects.register_urls("pay/", "commerce.customers.urls")
effects.register_urls("webhooks/", "commerce.urls")


def _invoice(task: Any) -> str | None:
    invoice = task.refs.get("invoice") if isinstance(task.refs, dict) else None
    return invoice if isinstance(invoice, str) else None


def _customer_page(task: Any) -> str | None:
    invoice = _invoice(task)
    return payment_link(invoice, task.pk) if invoice else None


def _retryable(task: Any) -> bool:
    """Whether the payment this renewal was about may be tried again now: certainly not
    done, and nothing for its invoice in progress (the customer's page says the same).
    Only on an ended renewal: while any task of the invoice goes on, it may still pay."""
    invoice = _invoice(task)
    if task.kind != "renewal" or invoice is None or task.status not in effects.FINAL:
        return False
    payment = payment_of(invoice=invoice)
    return payment is not None and payment.state == PaymentState.NOT_DONE and payment.retryable


def _retry(*, task: Any, actor: str, reason: str) -> Any:
    try:
        return payment_retry(invoice=task.refs["invoice"], actor=actor, reason=reason)
    except PaymentRefused as exc:
        raise effects.ActionRefused(exc.operator) from exc


effects.register_link(effects.TaskLink(label="Customer's page", url=_customer_page))
effects.register_action(
    effects.TaskAction(
        name="retry",
        label="Retry payment",
        # Starting a charge is starting a task: the same permission as "New task".
        permission="journal.start_task",
        question=(
            "Start a new renewal that charges this invoice again, as its latest renewal asked? "
            "No money has been taken for it, and nothing for it is in progress. The customer's "
            "page shows the payment being checked until the new attempt ends."
        ),
        available=_retryable,
        perform=_retry,
    )
)
