"""The operators' pages, second pass (issue 21), in Chromium: decisions in the history,
banners that stay true without a reload, refused actions not offered, a late charge corrected
and refunded from the page, and the list searched by a customer's address."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from django.test import override_settings

from agentops.effects import task_start
from agentops.kinds import tool_registry
from agentops.provider_events import provider_event_apply
from journal.leases import lease_acquire, lease_release
from journal.models import Step, Task
from journal.operator import decision_apply, step_resolve
from journal.protocols import Call
from journal.record import step_record, task_create
from tests.agentops.sandboxed import sandbox_settings
from tests.agentops.test_webhooks import SECRET, event, sign
from tests.agentops.workers import Fleet
from tests.browser.conftest import log_in, operator, screenshot
from tests.browser.test_pages import status, trip
from tests.databases import flag
from tests.journal.support import invoice
from tests.sandbox.fixtures import SandboxHandle, wait_for

pytestmark = pytest.mark.usefixtures("committed")


@pytest.fixture
def webhooks(app_server: str) -> Iterator[str]:
    """The app takes Stripe's signed notifications (the secret the tests sign with)."""
    with override_settings(STRIPE_WEBHOOK_SECRET=SECRET):
        yield f"{app_server}/webhooks/stripe"


def charge_args(inv: str, amount: int = 4900) -> dict[str, Any]:
    return {"invoice": inv, "amount": amount, "currency": "usd", "payment_method": "pm_card_visa"}


def unknown_charge(email: str = "ada@example.com") -> Step:
    """A renewal's charge that nothing could settle: unknown, its lookups used up, the task
    handed to a person (who is told to reconcile once more)."""
    inv = invoice()
    task = task_create(
        kind="renewal",
        goal="Renew Ada's plan",
        refs={"invoice": inv, "amount": 4900, "email": email},
    )
    lease = lease_acquire(task_id=task.pk, owner="runner")
    assert lease is not None
    step = step_record(
        lease=lease,
        decision=Call("charge_customer", charge_args(inv)),
        tools={"charge_customer": tool_registry()["charge_customer"]},
    )
    lease_release(lease)
    flag(
        task.pk,
        "rounds_exhausted",
        f"step {step.key} (charge_customer) is still unknown after 3 reconciliation rounds",
        step_id=step.pk,
    )
    return Step.objects.get(pk=step.pk)


def test_an_approval_by_keyboard_is_in_the_history_with_its_actor_and_reason(
    fleet: Fleet, app_server: str, page: Any
) -> None:
    fleet.worker()
    task = trip()
    wait_for(lambda: status(task) == "awaiting_approval", timeout=20, what="the hold")
    who = operator()
    log_in(page, app_server, who)
    page.goto(f"{app_server}/tasks/{task.pk}")
    assert "4,200.00 USD" in page.inner_text("#held-callout h2")
    screenshot(page, "task-held-for-approval", phone=True)
    # Two keys and the reason: "a" opens the confirmation with the focus in it.
    page.keyboard.press("a")
    page.wait_for_selector("#held-confirm form")
    page.wait_for_function("document.activeElement && document.activeElement.name === 'reason'")
    page.keyboard.type("the customer confirmed by phone")
    page.keyboard.press("Control+Enter")
    page.wait_for_selector("#task-head .badge.status-finished", timeout=30_000)
    history = page.inner_text("#history")
    assert who in history and "approved" in history
    assert "the customer confirmed by phone" in history and "4,200.00 USD" in history
    digest = task.approvals.get().digest
    assert digest in history
    charged = Step.objects.get(task=task, tool="charge_customer")
    beside = page.inner_text(f"#step-{charged.n} ul.decisions")
    assert who in beside and "approved" in beside and "the customer confirmed by phone" in beside
    screenshot(page, "task-decisions", phone=True)


def test_a_banner_about_an_unknown_step_clears_when_it_settles_without_a_reload(
    webhooks: str, page: Any
) -> None:
    step = unknown_charge()
    app = webhooks.removesuffix("/webhooks/stripe")
    log_in(page, app, operator())
    page.goto(f"{app}/tasks/{step.task_id}")
    banner = page.inner_text("#attention")
    assert "still unknown" in banner and "Reconcile now to look again" in banner
    assert page.locator(f"#step-{step.n} .action-reconcile").count() == 1
    page.evaluate("window.loadedOnce = true")
    # The charge landed after all: the provider's signed notification settles the step.
    payload = event("payment_intent.succeeded", step, status="succeeded")
    answer = requests.post(
        webhooks,
        data=payload,
        headers={"Stripe-Signature": sign(payload), "Content-Type": "application/json"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    provider_event_apply(provider="stripe", event_id=answer.json()["event"])  # a worker's part
    # The page polls while the task is with a person: the banner says what is true now.
    page.wait_for_selector("#attention.settled", timeout=15_000)
    assert page.evaluate("window.loadedOnce") is True
    banner = page.inner_text("#attention")
    assert "has settled since" in banner and "Reconcile now to look again" not in banner
    assert page.locator(".action-reconcile").count() == 0
    assert page.locator(f"#step-{step.n} .badge.state-done").count() == 1


def test_an_action_the_journal_would_refuse_is_not_offered_and_says_why(
    app_server: str, page: Any
) -> None:
    step = unknown_charge()
    log_in(page, app_server, operator())
    page.goto(f"{app_server}/tasks/{step.task_id}")
    cancel = page.locator("#task-head button.action-cancel")
    assert cancel.is_disabled()
    why = page.inner_text("#why-not-cancel")
    assert "it may have happened" in why and "reconcile it or resolve it by hand" in why
    assert cancel.get_attribute("aria-describedby") == "why-not-cancel"
    assert page.locator("#task-head a.action-cancel").count() == 0
    cancel.click(force=True)  # a disabled button does nothing
    assert page.locator("#task-confirm form").count() == 0
    assert Task.objects.get(pk=step.task_id).status == "needs_human"


def test_a_late_charge_is_corrected_and_refunded_from_the_page_once(
    fleet: Fleet,
    webhooks: str,
    payments_sandbox: SandboxHandle,
    mail_sandbox: SandboxHandle,
    bookings_sandbox: SandboxHandle,
    page: Any,
) -> None:
    app = webhooks.removesuffix("/webhooks/stripe")
    tools = sandbox_settings(payments_sandbox, mail_sandbox, bookings_sandbox)
    payments_sandbox.client.config(webhook_url=webhooks, webhook_secret=SECRET, webhook_delay=0)
    try:
        step = unknown_charge()
        # A person found nothing at the provider and settled the charge "not done", the task
        # still with them; then the charge the provider was still working on landed, and its
        # notification contradicts the journal. (Had the task been cancelled, it would have
        # ended: the correction would be recorded, and the refund made by hand.)
        decision_apply(
            decision_id=step_resolve(
                step_id=step.pk, actor="ops", done=False, reason="nothing at the provider"
            )
        )
        with override_settings(**tools):
            tool_registry()["charge_customer"].call(step.args, key=step.key)
        fleet.worker(STRIPE_WEBHOOK_SECRET=SECRET)  # it applies what the web server stores
        wait_for(
            lambda: Task.objects.get(pk=step.task_id).attention_code == "conflict",
            timeout=20,
            what="the late charge's notification",
        )
        who = operator()
        log_in(page, app, who)
        page.goto(f"{app}/tasks/{step.task_id}")
        assert "a later report says it was done" in page.inner_text(f"#step-{step.n}")
        page.click(f"#step-{step.n} .action-correct")
        page.wait_for_selector(f"#confirm-{step.n} textarea[name=evidence]")
        assert "pi_" in page.input_value(f"#confirm-{step.n} textarea[name=evidence]")
        page.fill(f"#confirm-{step.n} textarea[name=reason]", "the provider shows the charge")
        page.click(f"#confirm-{step.n} button[type=submit]")
        page.wait_for_selector(f"#step-{step.n + 1} .badge.state-done")
        assert f"corrects #{step.n}" in page.inner_text(f"#step-{step.n + 1}")
        screenshot(page, "task-late-charge-corrected", phone=True)
        page.click("#task-head .action-compensate")
        page.wait_for_selector("#task-confirm textarea[name=reason]")
        assert "refund_charge" in page.inner_text("#task-confirm")
        page.fill("#task-confirm textarea[name=reason]", "the customer paid by cheque")
        page.click("#task-confirm button[type=submit]")
        page.wait_for_selector("#task-head .badge.status-compensated", timeout=30_000)
        history = page.inner_text("#history")
        assert (
            who in history
            and "corrected it" in history
            and "the customer paid by cheque" in history
        )
        intent = Step.objects.get(task_id=step.task_id, n=step.n + 1).evidence["payment_intent"]
        refunds = [
            e
            for e in payments_sandbox.client.ledger(operation="refunds.create")
            if e["params"].get("payment_intent") == intent
        ]
        assert len(refunds) == 1, refunds
    finally:
        payments_sandbox.client.config(webhook_url=None)


def test_the_list_finds_a_task_by_its_customers_email(app_server: str, page: Any) -> None:
    email = f"grace-{uuid.uuid4().hex[:8]}@example.com"
    mine = task_start(
        kind="renewal",
        goal="Renew Grace's plan",
        refs={"invoice": invoice(), "amount": 4900, "email": email},
    )
    other = task_start(
        kind="renewal",
        goal="Renew Alan's plan",
        refs={"invoice": invoice(), "amount": 4900, "email": "alan@example.com"},
    )
    log_in(page, app_server, operator("Operators (read-only)"))
    page.keyboard.press("/")  # the search, by keyboard
    assert page.evaluate("document.activeElement.name") == "q"
    page.keyboard.type(email)
    page.keyboard.press("Enter")
    page.wait_for_url(f"{app_server}/?*q=*")
    rows = page.inner_text("table.tasks tbody")
    assert mine.refs["invoice"] in rows and other.refs["invoice"] not in rows
    page.click(f"a.ref:has-text('{mine.refs['invoice']}')")
    page.wait_for_url(f"{app_server}/tasks/{mine.pk}**")
    assert mine.refs["invoice"] in page.title()
