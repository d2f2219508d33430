"""The customer's pages in Chromium (issue 21): from the payment-failed email to paying with
another card, the page checking a payment, a cancelled trip, a link that no longer works,
and axe-core on every state in light and dark."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from agentops.audit.models import Finding
from agentops.audit.services import audit_run, finding_resolve
from agentops.effects import task_start
from commerce.customers.links import payment_link, payment_token
from journal.leases import lease_acquire
from journal.models import Step, Task
from journal.outcomes import Reply
from journal.perform import step_perform
from journal.protocols import Finish
from journal.record import step_record, task_finish
from tests.agentops.sandboxed import sandbox_settings
from tests.agentops.test_customers import called_off, charge_call, declined, renewal
from tests.agentops.test_customers import paid as paid_and_refunded
from tests.agentops.workers import Fleet, quiet_world
from tests.browser.conftest import PHONE, accessibility_problems, screenshot
from tests.journal.support import ChargeTool, Provider, invoice
from tests.sandbox.fixtures import SandboxHandle, wait_for

pytestmark = pytest.mark.usefixtures("committed")

# The in-process app server is in test mode, as the workers' sandbox is: the page offers the
# provider's test cards.
TEST_MODE = {"STRIPE_API_KEY": "sk_test_agentops"}


@contextmanager
def refused_links_page(browser: Any) -> Iterator[Any]:
    """A customer's phone-sized page like the ``customer`` fixture's, for pages that answer
    404 on purpose (a link that no longer works): the browser's console error for that
    document's own status is expected; any other error still fails the test."""
    context = browser.new_context(viewport={"width": 800, "height": 700})
    opened = context.new_page()
    opened.set_default_timeout(20_000)
    problems: list[str] = []

    def seen(message: Any) -> None:
        own_404 = "status of 404" in message.text and "/pay/" in message.location.get("url", "")
        if message.type == "error" and not own_404:
            problems.append(message.text)

    opened.on("console", seen)
    opened.on("pageerror", lambda e: problems.append(str(e)))
    try:
        yield opened
    finally:
        context.close()
    assert problems == [], problems


def status(task: Task) -> str:
    return Task.objects.get(pk=task.pk).status


def charges(payments: SandboxHandle, inv: str) -> list[str]:
    """The statuses of the PaymentIntents the provider made for the invoice, in order."""
    return [
        e["status"]
        for e in payments.client.ledger(operation="payment_intents.create")
        if (e["params"].get("metadata") or {}).get("invoice") == inv
    ]


def email_to(mail: SandboxHandle, inv: str, purpose: str) -> dict[str, Any]:
    sent: list[dict[str, Any]] = [
        e["params"]
        for e in mail.client.ledger(operation="messages.send")
        if (e["params"].get("headers") or {}).get("X-Agentops-Reference") == inv
        and e["params"]["headers"].get("X-Agentops-Purpose") == purpose
    ]
    assert len(sent) == 1, sent  # one email of that purpose, about that invoice
    return sent[0]


def _sent(mail: SandboxHandle, inv: str, purpose: str) -> dict[str, Any] | None:
    """The one email of that purpose about that invoice, once it is sent; None until then."""
    try:
        return email_to(mail, inv, purpose)
    except AssertionError:
        return None


def link_in(body: str, base: str) -> str:
    found = re.search(re.escape(base) + r"/pay/[^/\s]+/", body)
    assert found, body
    return found.group(0)


# --- From the email to another card ----------------------------------------------------------


def test_a_customer_follows_the_email_and_pays_with_another_card_after_a_decline(
    fleet: Fleet,
    app_server: str,
    payments_sandbox: SandboxHandle,
    mail_sandbox: SandboxHandle,
    customer: Any,
) -> None:
    fleet.worker(CUSTOMER_BASE_URL=app_server)
    inv = invoice()
    task = task_start(
        kind="renewal",
        goal="renew; the card has no funds",
        refs={
            "invoice": inv,
            "amount": 4900,
            "email": "grace@example.com",
            "payment_method": "pm_card_chargeDeclinedInsufficientFunds",
        },
    )
    wait_for(lambda: status(task) == "finished", timeout=20, what="the decline")
    failed = email_to(mail_sandbox, inv, "payment_failed")
    assert "does not have enough funds" in failed["body"]
    with override_settings(**TEST_MODE):
        customer.goto(link_in(failed["body"], app_server))
        reason = customer.inner_text("#payment .reason")
        assert "Your card does not have enough funds" in reason
        assert "No money has been taken" in reason
        assert "insufficient_funds" not in customer.content()
        # The declined card is offered only as declined: never silently charged again.
        declined_card = customer.locator("input[value=pm_card_chargeDeclinedInsufficientFunds]")
        assert declined_card.is_disabled()
        screenshot(customer, "customer-declined", phone=True)
        customer.check("input[value=pm_card_visa]")
        customer.dblclick("button.pay")  # pressed twice: one payment
        customer.wait_for_selector("#payment.state-done", timeout=30_000)
    assert "Receipt reference: ch_" in customer.inner_text("#payment")
    assert charges(payments_sandbox, inv) == ["requires_payment_method", "succeeded"]
    assert Task.objects.filter(refs__invoice=inv).count() == 2
    screenshot(customer, "customer-paid", phone=True)


def test_a_double_submit_of_the_new_card_charges_once(
    fleet: Fleet, app_server: str, payments_sandbox: SandboxHandle, browser: Any
) -> None:
    fleet.worker()
    inv = invoice()
    task = task_start(
        kind="renewal",
        goal="renew; declined",
        refs={
            "invoice": inv,
            "amount": 4900,
            "email": "grace@example.com",
            "payment_method": "pm_card_chargeDeclined",
        },
    )
    wait_for(lambda: status(task) == "finished", timeout=20, what="the decline")
    # Two windows on the same link, each with a card chosen, sent at the same moment (the
    # form's submit(), which skips the script's one-press guard, as a page without it would).
    context = browser.new_context()
    try:
        tabs = [context.new_page() for _ in range(2)]
        with override_settings(**TEST_MODE):
            for tab in tabs:
                tab.goto(f"{app_server}{payment_link(inv, task.pk)}")
                tab.check("input[value=pm_card_mastercard]")
            for tab in tabs:
                tab.evaluate("document.querySelector('form.card-form').submit()")
            for tab in tabs:
                tab.wait_for_selector("#payment.state-unknown, #payment.state-done, .refused")
        refusals = [tab.locator(".refused").count() for tab in tabs]
        assert sorted(refusals) == [0, 1]
        refused = tabs[refusals.index(1)].inner_text(".refused")
        assert "please do not pay again" in refused
        wait_for(
            lambda: charges(payments_sandbox, inv)[-1:] == ["succeeded"],
            timeout=30,
            what="the new card's charge",
        )
    finally:
        context.close()
    assert charges(payments_sandbox, inv) == ["requires_payment_method", "succeeded"]
    assert Task.objects.filter(refs__invoice=inv).count() == 2


def test_a_customer_sees_their_payment_go_from_unknown_to_done_without_reloading(
    fleet: Fleet, app_server: str, payments_sandbox: SandboxHandle, customer: Any
) -> None:
    payments_sandbox.client.fault("payment_intents.create", "latency_before_effect", delay=4.0)
    fleet.worker()
    inv = invoice()
    task = renewal(inv)
    wait_for(lambda: status(task) == "waiting", timeout=20, what="the charge to be unknown")
    customer.goto(f"{app_server}{payment_link(inv, task.pk)}")
    customer.wait_for_selector("#payment.state-unknown")
    assert "Please don't pay again" in customer.inner_text("#payment")
    assert customer.locator("button.pay").count() == 0
    # The next check's time, in the browser's zone (the script rewrote the UTC fallback).
    customer.wait_for_selector("#payment time[data-localized]")
    screenshot(customer, "customer-unknown", phone=True)
    customer.evaluate("window.loadedOnce = true")
    customer.wait_for_selector("#payment.state-done", timeout=30_000)
    assert customer.evaluate("window.loadedOnce") is True
    assert "Receipt reference: ch_" in customer.inner_text("#payment")
    assert charges(payments_sandbox, inv) == ["succeeded"]
    # Swapped to paid in place: its times in the reader's zone, and its receipt can be
    # printed, the receipt alone.
    customer.wait_for_selector("#payment .receipt time[data-localized]")
    # The card, as the provider's charge says it (the renewal's default test card).
    assert "Visa ending 4242" in customer.inner_text(".receipt")
    assert customer.locator("button.print").is_visible()
    customer.emulate_media(media="print")
    assert customer.locator(".receipt").is_visible()
    assert customer.locator(".print-only").is_visible()
    assert not customer.locator("button.print").is_visible()
    assert not customer.locator("footer.contact").is_visible()
    customer.emulate_media(media="screen")


# --- Refunded -------------------------------------------------------------------------------


def test_a_renewal_refunded_at_the_provider_tells_its_customer_refunded_with_the_amount(
    fleet: Fleet,
    app_server: str,
    payments_sandbox: SandboxHandle,
    mail_sandbox: SandboxHandle,
    bookings_sandbox: SandboxHandle,
    customer: Any,
) -> None:
    """Paid, then refunded in the provider's dashboard (no key, no step): once the provider
    audit finds it, the page the receipt links to says Refunded, with the amount, never
    "Paid… Thank you" again; axe finds nothing serious in light and dark, on a desktop's
    and a phone's width."""
    since = timezone.now()
    fleet.worker(CUSTOMER_BASE_URL=app_server)
    inv = invoice()
    task = renewal(inv)
    wait_for(lambda: status(task) == "finished", timeout=20, what="the renewal")
    url = link_in(email_to(mail_sandbox, inv, "receipt")["body"], app_server)
    customer.goto(url)
    assert customer.inner_text("h1") == "Paid"
    charge = Step.objects.get(task=task, tool="charge_customer", kind="call")
    payments_sandbox.client.refund_from_dashboard(charge.evidence["payment_intent"])
    with override_settings(**sandbox_settings(payments_sandbox, mail_sandbox, bookings_sandbox)):
        report = audit_run(provider="stripe", since=since, until=timezone.now(), trigger="command")
    assert not report.error, report.error
    customer.goto(url)
    assert customer.inner_text("h1") == "Refunded"
    told = customer.inner_text("#payment")
    assert "Your payment of 49.00 USD was refunded in full" in told
    assert "Thank you" not in told and customer.locator("button.pay").count() == 0
    # Once a person resolves the finding, the customer is emailed the refund once (a notice
    # keyed by the refund), and its link opens the same page.
    finding = Finding.objects.get(step=charge)
    finding_resolve(finding_id=finding.pk, actor="ops", reason="refunded by support")
    refund_mail = wait_for(
        lambda: _sent(mail_sandbox, inv, "refund"),
        timeout=30,
        interval=0.2,
        what="the refund email",
    )
    assert "We refunded your payment of 49.00 USD" in refund_mail["body"]
    customer.goto(link_in(refund_mail["body"], app_server))
    assert customer.inner_text("h1") == "Refunded"
    found: dict[str, list[str]] = {}
    desktop = customer.viewport_size
    for width, size in (("desktop", desktop), ("phone", PHONE)):
        customer.set_viewport_size(size)
        for scheme in ("light", "dark"):
            customer.emulate_media(color_scheme=scheme)
            customer.reload()
            found[f"{width} ({scheme})"] = accessibility_problems(customer)
    customer.set_viewport_size(desktop)
    customer.emulate_media(color_scheme="light")
    customer.reload()
    assert {k: v for k, v in found.items() if v} == {}
    screenshot(customer, "customer-refunded", phone=True)


@pytest.mark.parametrize(
    ("locale", "written"),
    [("en-US", r"^[A-Z][a-z]+ \d{1,2}, \d{4}"), ("en-GB", r"^\d{1,2} [A-Z][a-z]+ \d{4}")],
)
def test_the_customers_dates_are_written_one_way_in_their_locale_and_zone(
    app_server: str, browser: Any, locale: str, written: str
) -> None:
    """The server's words (UTC) and the script's (the reader's zone) in one order, the one
    of the browser's language: never "December 3, 2026" beside "3 December 2026"."""
    quiet_world()
    inv = invoice()
    task = paid_and_refunded(inv, refunded=True, cancelled=True)
    context = browser.new_context(locale=locale, timezone_id="America/New_York")
    try:
        page = context.new_page()
        page.goto(f"{app_server}{payment_link(inv, task.pk)}")
        page.wait_for_selector("#payment time[data-localized]")
        texts = page.locator("#payment time").all_inner_texts()
        assert len(texts) == 2 and all(re.match(written, t) for t in texts), texts
        assert texts[1].endswith(" EST"), texts  # the reader's zone, not UTC
    finally:
        context.close()


# --- Links that open no payment --------------------------------------------------------------


def test_an_expired_link_gets_a_styled_page_that_says_how_to_get_a_new_one(
    app_server: str, browser: Any
) -> None:
    quiet_world()
    inv = invoice()
    task = renewal(inv)
    url = f"{app_server}/pay/{payment_token(inv, task.pk)}/"
    with override_settings(CUSTOMER_LINK_MAX_AGE_DAYS=-1), refused_links_page(browser) as customer:
        answer = customer.goto(url)
        assert answer is not None and answer.status == 404
        assert customer.inner_text("h1") == "This payment link has expired"
        text = customer.inner_text("body")
        assert "How to get a new link" in text and "billing@example.com" in text
        assert "Not Found" not in text
        # Styled: the customers' stylesheet applies, not a browser's bare page.
        assert customer.eval_on_selector("#link-refused", "e => getComputedStyle(e).borderRadius")
        screenshot(customer, "customer-link-expired", phone=True)
        broken = customer.goto(url[: -len("abc/")] + "/")
        assert broken is not None and broken.status == 404
        assert customer.inner_text("h1") == "This payment link does not work"


def test_an_expired_link_has_a_fresh_one_emailed_that_opens_the_page(
    fleet: Fleet, app_server: str, mail_sandbox: SandboxHandle, browser: Any
) -> None:
    """From the expired page, "Email me a new link": the address on file gets one message
    with a link bound to a new task, and that link opens the payment's page."""
    fleet.worker(CUSTOMER_BASE_URL=app_server)
    inv = invoice()
    task = declined(inv)
    url = f"{app_server}{payment_link(inv, task.pk)}"
    with override_settings(CUSTOMER_LINK_MAX_AGE_DAYS=-1), refused_links_page(browser) as page:
        page.goto(url)
        page.click("button[name=new_link]")
        page.wait_for_selector("#link-refused [role=status]")
        assert "a new link is on its way" in page.inner_text("#link-refused")
        assert page.locator("button[name=new_link]").count() == 0
    wait_for(
        lambda: any(
            (e["params"].get("headers") or {}).get("X-Agentops-Reference") == inv
            for e in mail_sandbox.client.ledger(operation="messages.send")
        ),
        timeout=20,
        what="the fresh link's email",
    )
    sent = email_to(mail_sandbox, inv, "link")
    assert sent["to"] == "ada@example.com"
    fresh = link_in(sent["body"], app_server)
    assert fresh != url
    with override_settings(**TEST_MODE), refused_links_page(browser) as page:
        page.goto(fresh)
        assert page.inner_text("h1") == "Your payment didn't go through"


# --- axe-core on every state, light and dark -------------------------------------------------


class Pays(ChargeTool):
    """A charge the provider accepts at once, with Stripe's evidence."""

    def guard(self, args: Any) -> str:
        return f"charge:{args['invoice']}"

    def call(self, args: Any, *, key: str) -> Any:
        return Reply(200, evidence={"payment_intent": "pi_test123", "charge": "ch_test123"})


def paid(inv: str) -> Task:
    """Paid, for an invoice with lines (the receipt's table is checked with the rest)."""
    refs = {
        "invoice": inv,
        "amount": 4900,
        "email": "ada@example.com",
        "lines": [
            {"description": "1 × Team plan (at $39.00 / month)", "quantity": 1, "amount": 3900},
            {"description": "2 × Extra seat (at $5.00 / month)", "quantity": 2, "amount": 1000},
        ],
    }
    task = task_start(kind="renewal", goal="renew", refs=refs)
    lease = lease_acquire(task_id=task.pk, owner="test")
    assert lease is not None
    tool = Pays(Provider(), name="charge_customer", evidence=("payment_intent",))
    step = step_record(lease=lease, decision=charge_call(inv), tools={"charge_customer": tool})
    step_perform(lease=lease, step=step, tool=tool)
    task_finish(lease=lease, decision=Finish("paid"), summary="1 done.")
    return task


def cancelled_trip(inv: str) -> Task:
    refs = {
        "invoice": inv,
        "amount": 84000,
        "email": "alan@example.com",
        "flight": "TP1351",
        "traveller": f"Alan {inv}",
        "hotel": f"Alfama {inv}",
        "check_in": "2027-03-01",
        "check_out": "2027-03-04",
    }
    trip = task_start(kind="trip", goal="Alan's trip", refs=refs)
    called_off(trip)
    return trip


# docs/pages.md's pictures of the states the flows above do not show.
SHOWN = {
    ("cancelled", "light"): "customer-cancelled",
    ("not-paid", "dark"): "customer-declined-dark",
}


def test_every_customer_state_has_no_serious_or_critical_axe_violation_in_light_and_dark(
    app_server: str, browser: Any
) -> None:
    quiet_world()  # no worker: each state stays as it is made
    made = {
        "paid": paid(invoice()),
        "not-paid": declined(invoice(), code="insufficient_funds"),
        "checking": renewal(invoice()),
        "cancelled": cancelled_trip(invoice()),
        "refunded": paid_and_refunded(invoice(), refunded=True),
    }
    states = {
        name: f"{app_server}{payment_link(task.refs['invoice'], task.pk)}"
        for name, task in made.items()
    }
    expected = {
        "paid": "Paid",
        "not-paid": "Your payment didn't go through",
        "checking": "We're checking your payment",
        "cancelled": "Your trip was cancelled",
        "refunded": "Refunded",
        "link-expired": "This payment link has expired",
    }
    inv = invoice()
    states["link-expired"] = f"{app_server}/pay/{payment_token(inv, renewal(inv).pk)}/"
    found: dict[str, list[str]] = {}
    with override_settings(**TEST_MODE), refused_links_page(browser) as customer:
        for scheme in ("light", "dark"):
            customer.emulate_media(color_scheme=scheme)
            for name, url in states.items():
                with override_settings(CUSTOMER_LINK_MAX_AGE_DAYS=-1 if "expired" in name else 30):
                    customer.goto(url)
                    assert customer.inner_text("h1") == expected[name], name
                    if name == "paid":
                        lines = customer.inner_text("table.receipt-lines")
                        assert "2 × Extra seat (at $5.00 / month)\t2\t10.00 USD" in lines
                    found[f"{name} ({scheme})"] = accessibility_problems(customer)
                    dark = customer.evaluate("matchMedia('(prefers-color-scheme: dark)').matches")
                    assert dark is (scheme == "dark")
                    if (name, scheme) in SHOWN:
                        screenshot(customer, SHOWN[name, scheme], phone=scheme == "light")
    assert {k: v for k, v in found.items() if v} == {}
    assert len(found) == 12
