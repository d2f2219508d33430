"""The operators' pages in Chromium, against real workers and the sandbox (the customers'
pages: test_customer_pages.py)."""

from __future__ import annotations

from typing import Any

import pytest

from agentops.effects import task_start
from journal.models import Approval, Task
from tests.agentops.workers import Fleet
from tests.browser.conftest import log_in, operator, screenshot
from tests.databases import flag
from tests.journal.support import invoice
from tests.sandbox.fixtures import SandboxHandle, wait_for

pytestmark = pytest.mark.usefixtures("committed")


def renewal(inv: str) -> Task:
    return task_start(
        kind="renewal",
        goal="Renew Ada's plan (the provider takes its time)",
        refs={"invoice": inv, "amount": 4900, "email": "ada@example.com"},
    )


def trip(**change: Any) -> Task:
    tag = invoice()
    refs = {
        "invoice": tag,
        "amount": 420000,
        "email": "alan@example.com",
        "flight": "TP1351",
        "traveller": f"Alan {tag}",
        "hotel": f"Alfama {tag}",
        "check_in": "2027-03-01",
        "check_out": "2027-03-04",
        **change,
    }
    return task_start(kind="trip", goal="Alan's trip to Lisbon, above 3,000.00", refs=refs)


def status(task: Task) -> str:
    return Task.objects.get(pk=task.pk).status


def test_an_operator_watches_the_six_second_charge_go_from_unknown_to_done(
    fleet: Fleet, app_server: str, payments_sandbox: SandboxHandle, page: Any
) -> None:
    # Shrunk: the client gives up at 0.5 s, the charge lands at 4 s.
    payments_sandbox.client.fault("payment_intents.create", "latency_before_effect", delay=4.0)
    fleet.worker()
    log_in(page, app_server, operator("Operators (read-only)"))
    task = renewal(invoice())
    wait_for(lambda: status(task) == "waiting", timeout=20, what="the charge to be unknown")
    page.goto(f"{app_server}/tasks/{task.pk}")
    page.wait_for_selector("#step-1 .badge.state-unknown")
    page.evaluate("window.loadedOnce = true")
    # No reload: the page polls, and the step turns done when the lookup finds the charge.
    page.wait_for_selector("#step-1 .badge.state-done", timeout=30_000)
    page.wait_for_selector("#task-head .badge.status-finished", timeout=30_000)
    assert page.evaluate("window.loadedOnce") is True
    page.click("#step-1 details.timeline-table summary")
    story = page.inner_text("#step-1 table.events")  # the timeline keeps the story
    assert "unknown" in story and "settled done" in story
    screenshot(page, "task-six-second-charge", phone=True)


def test_an_operator_approves_a_held_saga_and_it_completes(
    fleet: Fleet, app_server: str, payments_sandbox: SandboxHandle, page: Any
) -> None:
    fleet.worker()
    task = trip()
    wait_for(lambda: status(task) == "awaiting_approval", timeout=20, what="the hold")
    log_in(page, app_server, operator())
    page.goto(f"{app_server}/tasks/{task.pk}")
    page.click("#held-callout .action-approve")
    page.click("#held-confirm button[type=submit]")
    page.wait_for_selector("#task-head .badge.status-finished", timeout=30_000)
    held = Approval.objects.get(task=task)
    assert held.state == "used" and held.decided_by.startswith("ops-")
    charges = [
        e
        for e in payments_sandbox.client.ledger(operation="payment_intents.create")
        if (e["params"].get("metadata") or {}).get("invoice") == task.refs["invoice"]
    ]
    assert len(charges) == 1


def test_an_operator_compensates_a_held_saga(
    fleet: Fleet, app_server: str, bookings_sandbox: SandboxHandle, page: Any
) -> None:
    fleet.worker()
    task = trip()
    wait_for(lambda: status(task) == "awaiting_approval", timeout=20, what="the hold")
    log_in(page, app_server, operator())
    page.goto(f"{app_server}/tasks/{task.pk}")
    page.click("#held-callout .action-compensate")  # beside Approve and Reject
    page.fill("#held-confirm textarea[name=reason]", "the customer cancelled")
    page.click("#held-confirm button[type=submit]")
    page.wait_for_selector("#task-head .badge.status-compensated", timeout=30_000)
    assert page.locator("tbody.step .badge.state-compensated").count() == 2  # hold, hotel
    undone = {
        e["operation"]
        for e in bookings_sandbox.client.ledger(reference=None)
        if e["reference"] and e["reference"].startswith(f"ao:{task.pk}")
    }
    assert {"flight_holds.release", "hotel_bookings.cancel"} <= undone
    screenshot(page, "task-compensated-saga", phone=True)


def test_an_operator_retries_a_declined_payment_from_the_task_page(
    fleet: Fleet, app_server: str, page: Any
) -> None:
    fleet.worker()
    inv = invoice()
    task = task_start(
        kind="renewal",
        goal="renew, declined",
        refs={
            "invoice": inv,
            "amount": 4900,
            "email": "grace@example.com",
            "payment_method": "pm_card_chargeDeclined",
        },
    )
    wait_for(lambda: status(task) == "finished", timeout=20, what="the decline")
    who = operator()
    log_in(page, app_server, who)
    page.goto(f"{app_server}/tasks/{task.pk}")
    page.click("#task-head .action-retry")
    page.fill("#task-confirm textarea[name=reason]", "the customer says the card works now")
    page.click("#task-confirm button[type=submit]")
    wait_for(
        lambda: Task.objects.filter(refs__invoice=inv).count() == 2, timeout=20, what="the retry"
    )
    retry = Task.objects.filter(refs__invoice=inv).exclude(pk=task.pk).get()
    page.wait_for_url(f"{app_server}/tasks/{retry.pk}")  # taken to the new task
    audit = page.inner_text("#history")
    assert who in audit and "the customer says the card works now" in audit


def test_the_task_list_puts_what_needs_a_person_first(
    fleet: Fleet, app_server: str, page: Any
) -> None:

    fleet.worker()
    held = trip()
    stuck = renewal(invoice())
    wait_for(lambda: status(held) == "awaiting_approval", timeout=20, what="the hold")
    wait_for(lambda: status(stuck) == "finished", timeout=20, what="the renewal")
    flag(stuck.pk, "conflict", "a late webhook says declined")
    log_in(page, app_server, operator())
    panel = page.inner_text(".attention-panel")
    assert "awaiting approval" in panel and "conflicting reports" in panel
    page.click(".counters .filter-attention")
    page.wait_for_url(f"{app_server}/?state=attention")
    assert str(stuck.pk) in page.content() and str(held.pk) not in page.content()
    page.goto(f"{app_server}/")
    screenshot(page, "task-list")
