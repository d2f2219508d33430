"""axe-core on every operators' page, the error pages (a server error's too) included, in
light and dark mode: no serious or critical violation (issue 21). axe-playwright-python ships
axe-core's script; it runs in Debian's Chromium like the other browser tests. Also one page
per phone width, and the screenshots."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import override_settings
from django.urls import include, path

from agentops.effects import task_start
from journal.leases import lease_acquire, lease_release
from journal.models import Attention, Task
from journal.outcomes import Outcome
from journal.perform import step_perform
from journal.protocols import Call
from journal.record import step_record, task_create
from journal.selectors import task_facts_by_id
from journal.settle import step_mark_unknown
from tests.browser.conftest import (
    PHONE,
    accessibility_problems,
    log_in,
    operator,
    screenshot,
    stranger,
)
from tests.databases import as_owner
from tests.journal.support import ChargeTool, Provider, invoice

pytestmark = pytest.mark.usefixtures("committed")

SCHEMES = ("light", "dark")


def every_state() -> Task:
    """A task whose page shows each state a step can be in — done, not done, compensated, an
    undo, in flight, unknown — a held call, a banner, and a person's decision."""
    provider = Provider()
    charge = ChargeTool(provider, name="charge_customer", compensation="refund_charge")
    refund = ChargeTool(provider, name="refund_charge")
    tools: dict[str, Any] = {"charge_customer": charge, "refund_charge": refund}

    def call(tool: str = "charge_customer", **extra: Any) -> Call:
        args = {"invoice": invoice(), "amount": 420000, "currency": "usd", **extra}
        return Call(tool, args, raw={"model": "scripted"})

    task = task_create(
        kind="trip",
        goal="Alan's trip to Lisbon: every state a step can be in",
        refs={"invoice": invoice(), "amount": 420000, "email": "alan@example.com"},
        plan=[{"tool": "charge_customer"}],
        actor="ops-seed",
    )
    lease = lease_acquire(task_id=task.pk, owner="runner")
    assert lease is not None
    done = step_record(lease=lease, decision=call(), tools=tools)
    step_perform(lease=lease, step=done, tool=charge)
    charge.script = ["refuse"]
    refused = step_record(lease=lease, decision=call(), tools=tools)
    step_perform(lease=lease, step=refused, tool=charge)
    target = task_facts_by_id(task_id=task.pk).steps[0]
    undo = step_record(
        lease=lease,
        decision=Call("refund_charge", charge.undo_args(target.args, target.evidence)),
        tools=tools,
        undo_of=target,
    )
    step_perform(lease=lease, step=undo, tool=refund)
    step_record(lease=lease, decision=call(), tools=tools)  # in flight
    unknown = step_record(lease=lease, decision=call(), tools=tools)
    step_mark_unknown(
        lease=lease,
        step=unknown,
        outcome=Outcome.unknown("no reply within 5 s"),
        next_check_in=None,
        give_up=(Attention.ROUNDS_EXHAUSTED, f"step {unknown.key} is still unknown"),
    )
    lease_release(lease)
    args = {"invoice": task.refs["invoice"], "amount": 420000, "currency": "usd"}
    # A request still pending while the task went to a person: written as the owner (the
    # page's every state, seeded), as journal_approval_request would have made it.
    as_owner(
        "INSERT INTO journal_approval (task_id, tool, args, digest, reason, state, "
        "requested_at, expires_at, decided_by, decision_reason) "
        "VALUES (%s, 'charge_customer', %s::jsonb, encode(sha256(convert_to(jsonb_build_object("
        "'tool', 'charge_customer', 'args', %s::jsonb)::text, 'UTF8')), 'hex'), %s, 'pending', "
        "now(), now() + interval '1 hour', '', '')",
        [
            task.pk,
            json.dumps(args),
            json.dumps(args),
            "charge_customer of 4,200.00 USD is above 3,000.00 USD: a person approves it first",
        ],
    )
    return task


def _broken(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a failure on purpose: the server error page is what is tested")


# The app's own addresses, and one that fails (ROOT_URLCONF, for the server error page).
urlpatterns = [path("broken-on-purpose", _broken), path("", include("agentops.urls"))]


def check(page: Any, where: str, problems: dict[str, list[str]]) -> None:
    found = accessibility_problems(page)
    if found:
        problems[where] = found


def test_no_operators_page_has_a_serious_or_critical_accessibility_violation(
    app_server: str, page: Any
) -> None:
    task = every_state()
    task_start(
        kind="renewal",
        goal="Renew Ada's plan",
        refs={"invoice": invoice(), "amount": 4900, "email": "ada@example.com"},
    )
    problems: dict[str, list[str]] = {}
    for scheme in SCHEMES:
        page.emulate_media(color_scheme=scheme)
        page.context.clear_cookies()
        page.goto(f"{app_server}/login/")
        check(page, f"login ({scheme})", problems)
        log_in(page, app_server, operator())
        page.wait_for_selector("table.tasks")
        check(page, f"task list ({scheme})", problems)
        page.goto(f"{app_server}/tasks/{task.pk}")
        for badge in ("done", "not-done", "compensated", "in-flight", "unknown", "held"):
            assert page.locator(f"tbody.step .badge.state-{badge}").count() >= 1, badge
        page.click("#task-body details.timeline-table summary >> nth=0")
        page.click("#step-1 details.json summary >> nth=1")  # its evidence
        check(page, f"task page, every state ({scheme})", problems)
        if scheme == "dark":
            screenshot(page, "task-every-state-dark")
        page.click("#held-callout .action-approve")
        page.wait_for_selector("#held-confirm form")
        check(page, f"an approval's confirmation ({scheme})", problems)
        page.goto(f"{app_server}/tasks/{task.pk}/resume")
        check(page, f"a confirmation, as a page ({scheme})", problems)
        for kind in ("renewal", "trip", "reminders"):
            page.goto(f"{app_server}/tasks/new?kind={kind}")
            check(page, f"start form: {kind} ({scheme})", problems)
        page.goto(f"{app_server}/audit/")
        check(page, f"provider audit ({scheme})", problems)
    assert problems == {}, problems


def test_the_error_and_lockout_pages_have_no_serious_violation_either(
    app_server: str, browser: Any
) -> None:
    from axes.utils import reset

    # A context of its own: a page that answers 4xx or 5xx logs a console error by design.
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    opened = context.new_page()
    problems: dict[str, list[str]] = {}
    try:
        for scheme in SCHEMES:
            opened.emulate_media(color_scheme=scheme)
            opened.context.clear_cookies()
            log_in(opened, app_server, operator())
            opened.goto(f"{app_server}/tasks/{uuid.uuid4()}")
            assert "There is nothing at this address" in opened.inner_text("h1")
            check(opened, f"404 ({scheme})", problems)
            # A view that fails, served as production serves it (DEBUG off): Django's
            # server_error renders templates/500.html.
            with override_settings(DEBUG=False, ROOT_URLCONF=__name__):
                failed = opened.goto(f"{app_server}/broken-on-purpose")
                assert failed is not None and failed.status == 500
                assert "Something went wrong on our side" in opened.inner_text("h1")
                assert "RuntimeError" not in opened.content()  # never the traceback
                check(opened, f"500 ({scheme})", problems)
            opened.context.clear_cookies()
            log_in(opened, app_server, stranger())
            assert "may not" in opened.inner_text("h1")
            check(opened, f"403 ({scheme})", problems)
            opened.context.clear_cookies()
            opened.goto(f"{app_server}/login/")
            name = f"stranger-{uuid.uuid4().hex[:6]}"
            for _ in range(6):
                opened.fill("input[name=username]", name)
                opened.fill("input[name=password]", "wrong")
                opened.click("button[type=submit]")
                opened.wait_for_load_state()
                if opened.locator("#lockout-for").count():
                    break
            assert "15 min" in opened.inner_text("#lockout-for")
            check(opened, f"lockout ({scheme})", problems)
            reset(ip="127.0.0.1")  # the next log in, and the next test's, may go on
    finally:
        reset(ip="127.0.0.1")
        context.close()
    assert problems == {}, problems


def test_the_pages_read_on_a_phone(app_server: str, page: Any) -> None:
    task = every_state()
    log_in(page, app_server, operator())
    screenshot(page, "task-list", phone=True)
    page.set_viewport_size(PHONE)
    page.goto(f"{app_server}/tasks/{task.pk}")
    # Nothing wider than the screen but the tables, which scroll inside their own box.
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], width
    assert accessibility_problems(page) == []
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{app_server}/tasks/{task.pk}")
    screenshot(page, "task-every-state", phone=True)
