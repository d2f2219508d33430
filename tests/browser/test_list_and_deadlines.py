"""The task list's amount, customer and end, sortable, tasks first on a phone; the deadlines a
held step's approval is up against (issue 38)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from journal.models import Task
from journal.record import task_create
from tests.browser.conftest import PHONE, accessibility_problems, log_in, operator, screenshot
from tests.journal.support import invoice

pytestmark = pytest.mark.usefixtures("committed")


def renewal(email: str, amount: int, currency: str = "usd") -> Task:
    refs = {"invoice": invoice(), "amount": amount, "currency": currency, "email": email}
    return task_create(kind="renewal", goal="Renew a plan", refs=refs)


def refs_in_order(page: Any) -> list[str]:
    return [str(text) for text in page.locator("table.tasks tbody a.ref").all_inner_texts()]


def test_the_list_shows_amount_and_customer_and_sorts_by_them(app_server: str, page: Any) -> None:
    tag = uuid.uuid4().hex[:8]
    small = renewal(f"zoe-{tag}@example.com", 4900)
    large = renewal(f"ada-{tag}@example.com", 12099, "eur")
    log_in(page, app_server, operator("Operators (read-only)"))
    page.goto(f"{app_server}/?q={tag}")
    rows = page.inner_text("table.tasks tbody")
    assert "49.00 USD" in rows and "120.99 EUR" in rows
    assert f"zoe-{tag}@example.com" in rows and f"ada-{tag}@example.com" in rows
    page.click("table.tasks thead a.sort >> text=Amount")
    page.wait_for_url(f"{app_server}/?q={tag}&sort=amount")
    assert refs_in_order(page) == [large.refs["invoice"], small.refs["invoice"]]
    page.click("table.tasks thead a.sort >> text=Customer")
    page.wait_for_url(f"{app_server}/?q={tag}&sort=customer")
    assert refs_in_order(page) == [large.refs["invoice"], small.refs["invoice"]]
    assert page.get_attribute("table.tasks thead th[aria-sort]", "aria-sort") == "ascending"
    assert accessibility_problems(page) == []
    screenshot(page, "task-list-sorted")
    # On a phone: the filters folded, the tasks right after them.
    page.set_viewport_size(PHONE)
    page.goto(f"{app_server}/?q={tag}")
    assert page.evaluate("document.getElementById('filters-fold').open") is False
    assert page.locator("table.tasks").is_visible()
    assert not page.locator("input[type=search][name=q]").is_visible()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], width
    assert accessibility_problems(page) == []
    screenshot(page, "task-list-phone-folded")
    page.keyboard.press("/")  # the search's shortcut opens the fold
    assert page.locator("input[type=search][name=q]").is_visible()


def test_a_held_trips_panel_shows_when_its_flight_hold_lapses(
    fleet: Any, app_server: str, page: Any
) -> None:
    from tests.browser.test_pages import status, trip
    from tests.sandbox.fixtures import wait_for

    fleet.worker()
    task = trip()
    wait_for(lambda: status(task) == "awaiting_approval", timeout=20, what="the hold")
    log_in(page, app_server, operator("Operators (read-only)"))
    page.goto(f"{app_server}/tasks/{task.pk}")
    first = page.inner_text("#held-callout .deadline-first")
    # The sandbox's hold lapses in 15 min; the approval in far longer: the hold comes first.
    assert "Decide by" in first and "hold_flight" in first, first
    assert "in 14 min" in first or "in 15 min" in first, first
    warning = page.inner_text("#held-callout .deadline-warning")
    assert "Lapses soon: step 1 (hold_flight)" in warning
    assert "before this approval expires" in warning
    listed = page.inner_text("#deadlines .deadline-list")
    assert "This approval expires" in listed
    assert accessibility_problems(page) == []
    screenshot(page, "task-held-deadlines", phone=True)
    page.goto(f"{app_server}/?state=approval")
    row = page.inner_text(f"table.tasks tr:has(a[href^='/tasks/{task.pk}'])")
    assert "decide by" in row and "step 1 lapses" in row


def test_a_tasks_whole_history_reads_in_the_viewers_zone_or_utc(
    app_server: str, page: Any
) -> None:
    task = renewal(f"h-{uuid.uuid4().hex[:8]}@example.com", 4900)
    page.emulate_media(color_scheme="dark")
    page.context.clear_cookies()
    log_in(page, app_server, operator("Operators (read-only)"))
    page.goto(f"{app_server}/tasks/{task.pk}")
    page.click("#story summary")
    first = page.locator("#story table.story-table tbody tr").first
    assert "The task was started" in first.inner_text()
    switch = page.locator("#story button[data-zone-toggle]")
    assert switch.get_attribute("aria-pressed") == "false"
    switch.click()
    assert switch.get_attribute("aria-pressed") == "true"
    assert first.locator("time").inner_text().endswith("UTC")
    assert accessibility_problems(page) == []
    switch.click()
    assert not first.locator("time").inner_text().endswith("UTC")
