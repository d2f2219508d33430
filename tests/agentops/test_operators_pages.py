"""The operators' pages, second pass (issue 21), through Django's test client: decisions in
the history, data as people read it, banners and buttons that stay true, the list at scale,
and the error pages. Browser behaviour (polling, focus, keys, axe-core) is in tests/browser/.
"""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client, RequestFactory
from django.views.csrf import csrf_failure
from django.views.defaults import server_error

from agentops.effects import task_start
from agentops.kinds import tool_registry
from agentops.operators.readable import json_html, money, preview, when_html
from agentops.operators.selectors import PER_PAGE
from journal.leases import lease_acquire, lease_release
from journal.models import Entry, EntryKind, Step, Task
from journal.operator import decision_apply, step_resolve
from journal.outcomes import Outcome
from journal.protocols import Call
from journal.record import step_record, task_create
from journal.sagas import approval_request
from journal.settle import step_settle
from tests.agentops.test_operators import client_for, redis, unknown_step, user  # noqa: F401
from tests.agentops.workers import apply_decisions
from tests.databases import flag
from tests.journal.support import invoice

pytestmark = pytest.mark.usefixtures("committed")


def held_trip() -> Task:
    """A trip held before its charge of 4,200.00 USD, waiting for a person."""
    inv = invoice()
    task = task_create(
        kind="trip", goal="Lisbon", refs={"invoice": inv}, plan=[{"tool": "charge_customer"}]
    )
    lease = lease_acquire(task_id=task.pk, owner="runner")
    assert lease is not None
    args = {"invoice": inv, "amount": 420000, "currency": "usd", "payment_method": "pm_card_visa"}
    approval_request(
        lease=lease,
        tool="charge_customer",
        args=args,
        reason="above 3,000.00: a person approves it first",
        ttl=timedelta(hours=1),
    )
    lease_release(lease)
    return task


def late_charge() -> Step:
    """A renewal's charge settled not done by hand, the task still with the person; then the
    provider's report that it succeeded: a conflict, with the charge's evidence."""
    inv = invoice()
    task = task_create(kind="renewal", goal="renew", refs={"invoice": inv, "amount": 4900})
    lease = lease_acquire(task_id=task.pk, owner="runner")
    assert lease is not None
    args = {"invoice": inv, "amount": 4900, "currency": "usd", "payment_method": "pm_card_visa"}
    step = step_record(
        lease=lease,
        decision=Call("charge_customer", args),
        tools={"charge_customer": tool_registry()["charge_customer"]},
    )
    lease_release(lease)
    flag(task.pk, "rounds_exhausted", "the charge timed out and the lookups found nothing")
    decision_apply(
        decision_id=step_resolve(
            step_id=step.pk, actor="ops", done=False, reason="nothing at the provider"
        )
    )
    evidence = {"payment_intent": "pi_late1", "charge": "ch_late1", "amount": 4900}
    step_settle(
        step_id=step.pk,
        outcome=Outcome.done({**evidence, "currency": "usd"}, "payment pi_late1 succeeded"),
        via="webhook payment_intent.succeeded",
        actor="stripe",
    )
    return Step.objects.get(pk=step.pk)


# --- Decisions in the history -------------------------------------------------------------


def test_an_approval_is_in_the_history_with_who_when_why_the_digest_and_the_exact_call(
    redis: Any,  # noqa: F811
) -> None:
    operator = user("Operators")
    c = client_for(operator)
    task = held_trip()
    page = c.get(f"/tasks/{task.pk}").content.decode()
    callout = page[page.index('id="held-callout"') :]
    callout = callout[: callout.index("</section>")]
    # Approve and Reject in the callout, with the amount as people read it.
    assert "action-approve" in callout and "action-reject" in callout
    assert "4,200.00 USD" in callout and "420000 in minor units" in callout
    confirm = c.get(f"/tasks/{task.pk}/approve").content.decode()
    assert 'name="reason"' in confirm and "(optional)" in confirm
    held = task.approvals.get()
    done = c.post(
        f"/tasks/{task.pk}/approve",
        {"approval": held.pk, "digest": held.digest, "reason": "the customer confirmed by phone"},
    )
    assert done.status_code == 302
    page = c.get(f"/tasks/{task.pk}").content.decode()
    history = page[page.index('id="history"') :]
    assert operator.username in history and "approved" in history
    assert "the customer confirmed by phone" in history and held.digest in history
    assert "charge_customer" in history and "4,200.00 USD" in history


def test_every_decision_is_recorded_beside_its_step_with_who_and_why(redis: Any) -> None:  # noqa: F811
    operator = user("Operators")
    c = client_for(operator)
    step = unknown_step(flagged=True)
    url = f"/tasks/{step.task_id}/steps/{step.n}/resolve"
    c.post(url, {"outcome": "done", "evidence": "ch_seen_1", "reason": "seen in the dashboard"})
    page = c.get(f"/tasks/{step.task_id}").content.decode()
    row = page[page.index(f'id="step-{step.n}"') :]
    row = row[: row.index("</tbody>")]
    assert "settled it by hand" in row and operator.username in row
    assert "seen in the dashboard" in row


# --- Data people read -------------------------------------------------------------------------


def test_money_times_and_json_are_shown_as_people_read_them() -> None:
    assert money(420000, "usd") == "4,200.00 USD" and money(5000, "jpy") == "5,000 JPY"
    assert money("420000", "usd") == "" and money(1, None) == ""
    # A flight hold's expiry, epoch seconds from the provider: read out as a time.
    shown = json_html({"id": "fh_1", "expires_at": 1796096588.28}, label="evidence")
    assert "1796096588.28" in shown  # the value itself, as the provider sent it
    assert re.search(r'= <time datetime="20\d\d-\d\d-\d\dT[\d:]+Z"[^>]*>[^<]+ UTC</time>', shown)
    assert "<details" in shown and 'class="copy"' in shown and "data-copy=" in shown
    args = json_html({"amount": 420000, "currency": "usd"}, label="arguments")
    assert "= 4,200.00 USD" in args and "4,200.00 USD" in preview(
        {"amount": 420000, "currency": "usd"}
    )
    # Outside text is text.
    evil = json_html({"<script>": "<img src=x onerror=alert(1)>"})
    assert "<script>" not in evil and "<img" not in evil
    assert "(in " in str(when_html(1e10 - 1)) and "ago)" in str(when_html(1.5e9))


def test_a_collapsed_json_leads_with_the_names_the_installed_apps_declare() -> None:
    """Which names tell most is what the tools and kinds declare, not a list of the shipped
    domain's words: the example's credit (evidence ``id``) and its ticket (a goodwill task's
    reference) come before the rest, in alphabetical order."""
    credit = {"amount_note": "x", "channel": "c-1", "ticket": "T-1", "id": "cr_1"}
    assert preview(credit) == "id cr_1 · ticket T-1"
    charge = {"status": "succeeded", "charge": "ch_1", "payment_intent": "pi_1"}
    assert preview(charge) == "payment_intent pi_1 · charge ch_1"  # its evidence, then ids


def test_a_task_page_is_titled_by_its_reference_and_its_times_are_machine_readable() -> None:
    c = client_for(user("Operators (read-only)"))
    inv = invoice()
    task = task_start(
        kind="renewal", goal="renew", refs={"invoice": inv, "amount": 4900, "email": "a@b.co"}
    )
    page = c.get(f"/tasks/{task.pk}").content.decode()
    title = re.search(r"<title>(.*?)</title>", page, re.S).group(1)  # type: ignore[union-attr]
    assert inv in title and "renewal" in title
    assert re.search(r'<time datetime="\d{4}-\d\d-\d\dT[\d:]+Z" title="[^"]+ UTC" data-when', page)
    assert page.count("<h1") == 1


# --- Banners and buttons that stay true -----------------------------------------------------


def test_a_banner_about_an_open_step_says_so_once_the_step_settled(redis: Any) -> None:  # noqa: F811
    c = client_for(user("Operators"))
    step = unknown_step(flagged=True)  # key_dead: "reconcile once more"
    before = c.get(f"/tasks/{step.task_id}").content.decode()
    assert "reconcile once more" in before and ">Reconcile now<" in before
    step_settle(step_id=step.pk, outcome=Outcome.done({"id": "ch_late"}), via="webhook")
    after = c.get(f"/tasks/{step.task_id}").content.decode()
    banner = after[after.index('id="attention"') :]
    banner = banner[: banner.index("</section>")]
    assert (
        "has settled since" in banner and "reconcile once more" not in banner.split("<details")[0]
    )
    assert ">Reconcile now<" not in after and ">Resolve manually<" not in after
    # The page keeps polling while the task is with a person, so this reaches an open page.
    assert 'hx-trigger="every 2s"' in after


def test_cancel_is_not_offered_where_the_journal_would_refuse_it_and_says_why(redis: Any) -> None:  # noqa: F811
    c = client_for(user("Operators"))
    step = unknown_step(flagged=True)
    page = c.get(f"/tasks/{step.task_id}").content.decode()
    assert re.search(r'<button type="button" class="button action-cancel" disabled', page)
    assert "Not now: step" in page and "it may have happened" in page
    assert f'href="/tasks/{step.task_id}/cancel"' not in page
    # Asked anyway (an old page, a crafted request): the same sentence, and nothing done.
    refused = c.post(f"/tasks/{step.task_id}/cancel", {"reason": "stop"})
    assert refused.status_code == 409 and "it may have happened" in refused.content.decode()
    assert Task.objects.get(pk=step.task_id).status == "needs_human"


def test_a_conflicting_step_is_corrected_from_the_page_and_compensating_is_then_offered(
    redis: Any,  # noqa: F811
) -> None:
    operator = user("Operators")
    c = client_for(operator)
    late = late_charge()
    page = c.get(f"/tasks/{late.task_id}").content.decode()
    assert "a later report says it was done" in page and "action-correct" in page
    assert ">Compensate<" not in page  # nothing done to undo yet
    form = c.get(f"/tasks/{late.task_id}/steps/{late.n}/correct").content.decode()
    assert "pi_late1" in form  # the conflicting report's evidence, filled in
    bad = c.post(
        f"/tasks/{late.task_id}/steps/{late.n}/correct",
        {"evidence": '{"charge": "ch_late1"}', "reason": "seen"},
    )
    assert "give the evidence" in bad.content.decode() and "payment_intent" in bad.content.decode()
    c.post(
        f"/tasks/{late.task_id}/steps/{late.n}/correct",
        {"evidence": '{"payment_intent": "pi_late1", "charge": "ch_late1"}', "reason": "it landed"},
    )
    assert apply_decisions(late.task_id) == [f"corrected as step {late.n + 1}"]  # a worker's
    correction = Step.objects.get(task_id=late.task_id, n=late.n + 1)
    assert correction.state == "done" and correction.evidence["payment_intent"] == "pi_late1"
    page = c.get(f"/tasks/{late.task_id}").content.decode()
    assert f"corrected as #{correction.n}" in page and f"corrects #{late.n}" in page
    assert ">Compensate<" in page and "action-correct" not in page
    history = page[page.index('id="history"') :]
    assert "corrected it" in history and "it landed" in history and operator.username in history
    question = c.get(f"/tasks/{late.task_id}/compensate").content.decode()
    assert "refund_charge" in question and "49.00 USD" in question


# --- The list at scale ----------------------------------------------------------------------


def test_the_list_finds_customers_by_name_and_email_and_links_rows_by_reference() -> None:
    c = client_for(user("Operators (read-only)"))
    tag = uuid.uuid4().hex[:8]
    inv = invoice()
    task = task_start(
        kind="renewal",
        goal="renew",
        refs={"invoice": inv, "amount": 4900, "email": f"grace-{tag}@example.com"},
    )
    other = task_start(
        kind="renewal", goal="renew", refs={"invoice": invoice(), "amount": 4900, "email": "x@y.co"}
    )
    for q in (f"grace-{tag}@example.com", f"GRACE-{tag}", f"{tag}@example"):
        listed = c.get("/", {"q": q}).content.decode()
        assert str(task.pk) in listed and str(other.pk) not in listed, q
    listed = c.get("/", {"q": inv}).content.decode()
    assert re.search(rf'<a class="ref" href="/tasks/{task.pk}[^"]*">{inv}</a>', listed)
    # A reference is found whole: its beginning is not another invoice's.
    assert str(task.pk) not in c.get("/", {"q": inv[:-2]}).content.decode()


def test_the_list_filters_by_kind_attention_and_dates_sorts_and_pages(redis: Any) -> None:  # noqa: F811
    c = client_for(user("Operators (read-only)"))
    tag = f"who-{uuid.uuid4().hex[:8]}@example.com"
    refs = {"invoice": invoice(), "amount": 4900, "email": tag}
    stuck = unknown_step(task_create(kind="renewal", goal="stuck", refs=refs), flagged=True)
    fresh = task_start(kind="renewal", goal="renew", refs={**refs, "invoice": invoice()})
    page = c.get("/", {"q": tag, "attention": "key_dead"}).content.decode()
    assert str(stuck.task_id) in page and str(fresh.pk) not in page
    assert str(fresh.pk) not in c.get("/", {"q": tag, "kind": "reminders"}).content.decode()
    today = fresh.created_at.date().isoformat()
    assert str(fresh.pk) in c.get("/", {"q": tag, "since": today, "until": today}).content.decode()
    assert str(fresh.pk) not in c.get("/", {"q": tag, "until": "2001-01-01"}).content.decode()
    # Unknown values are left out, not an error.
    assert c.get("/", {"kind": "nope", "attention": "x", "since": "not a date"}).status_code == 200
    newest = c.get("/", {"q": tag}).content.decode()
    assert newest.index(str(fresh.pk)) < newest.index(str(stuck.task_id))
    stuck_first = c.get("/", {"q": tag, "sort": "stuck"}).content.decode()
    assert stuck_first.index(str(stuck.task_id)) < stuck_first.index(str(fresh.pk))
    everything = c.get("/").content.decode()
    assert "page 1 of" in everything and "worker" in everything and "Queue:" in everything

    # Paged: more of the customer's tasks than a page holds, newest first across the pages,
    # each on exactly one of them, the search kept in the links between them.
    for n in range(PER_PAGE + 1):
        task_create(kind="renewal", goal=f"renewal {n}", refs={**refs, "invoice": invoice()})
    mine = list(
        Task.objects.filter(refs__email=tag).order_by("-created_at", "-pk").values_list("pk")
    )
    assert len(mine) == PER_PAGE + 3

    def ids_on(html: str) -> list[str]:
        order = {str(pk): html.find(f"/tasks/{pk}") for (pk,) in mine}
        return sorted((pk for pk, at in order.items() if at >= 0), key=order.__getitem__)

    first = c.get("/", {"q": tag}).content.decode()
    assert f"{PER_PAGE + 3} tasks, 1–{PER_PAGE} shown · page 1 of 2" in first
    kept = f"q={tag.replace('@', '%40')}&amp;page="
    assert f'href="?{kept}2" rel="next">Next</a>' in first and 'rel="prev"' not in first
    second = c.get("/", {"q": tag, "page": "2"}).content.decode()
    assert f"{PER_PAGE + 1}–{PER_PAGE + 3} shown · page 2 of 2" in second
    assert f'href="?{kept}1" rel="prev">Previous</a>' in second and 'rel="next"' not in second
    assert ids_on(first) + ids_on(second) == [str(pk) for (pk,) in mine]
    # A page past the last is the last, not an error.
    assert ids_on(c.get("/", {"q": tag, "page": "9"}).content.decode()) == ids_on(second)


def test_bulk_reconcile_is_confirmed_in_the_page_with_a_reason_and_says_what_it_did(
    redis: Any,  # noqa: F811
) -> None:
    operator = user("Operators")
    c = client_for(operator)
    a = unknown_step()
    htmx = {"HX-Request": "true"}
    asked = c.post("/tasks/reconcile", {"task": [str(a.task_id)], "all": "selected"}, headers=htmx)
    html = asked.content.decode()
    assert 'name="reason"' in html and "Confirm: reconcile now" in html and "confirm(" not in html
    assert Task.objects.get(pk=a.task_id).status == "waiting"  # nothing yet
    done = c.post(
        "/tasks/reconcile",
        {"task": [str(a.task_id)], "all": "selected", "confirmed": "1", "reason": "provider back"},
        headers=htmx,
    )
    html = done.content.decode()
    assert 'id="bulk-result"' in html and "1 unknown step of 1 task" in html
    assert Task.objects.get(pk=a.task_id).status == "runnable"
    action = Entry.objects.get(task_id=a.task_id, kind=EntryKind.OPERATOR_ACTION)
    assert action.actor == operator.username and action.data["reason"] == "provider back"
    nothing = c.post(
        "/tasks/reconcile", {"all": "selected", "confirmed": "1"}, headers=htmx
    ).content.decode()
    assert "nothing was done" in nothing
    page = c.get("/").content.decode()
    assert "data-select-all" in page and "hx-confirm" not in page


# --- Error pages ----------------------------------------------------------------------------


def test_the_error_pages_say_what_happened_and_what_to_do() -> None:
    missing = client_for(user("Operators (read-only)")).get(f"/tasks/{uuid.uuid4()}")
    assert missing.status_code == 404
    assert "There is nothing at this address" in missing.content.decode()
    forbidden = client_for(user()).get("/")
    assert forbidden.status_code == 403
    assert "Operators (read-only)" in forbidden.content.decode()
    # Django renders these two itself: a server error without the request's context, a
    # form whose CSRF token no longer matches with it.
    request = RequestFactory().post("/tasks/reconcile")
    broken = server_error(request)
    assert (
        broken.status_code == 500 and "Something went wrong on our side" in broken.content.decode()
    )
    expired = csrf_failure(request)
    assert expired.status_code == 403 and "nothing was done" in expired.content.decode()
    pages = (missing, forbidden, broken, expired)
    for body in (p.content.decode() for p in pages):
        assert body.count("<h1") == 1 and "ops.css" in body and 'class="skip"' in body


def test_a_locked_out_login_says_for_how_long() -> None:
    anonymous = Client(REMOTE_ADDR=f"10.9.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}")
    name = f"nobody-{uuid.uuid4().hex[:6]}"
    last = None
    for _ in range(6):
        last = anonymous.post("/login/", {"username": name, "password": "wrong"})
    assert last is not None and last.status_code == 429
    page = last.content.decode()
    assert "Logins from your address are paused" in page
    assert re.search(r'id="lockout-for">15 min 0 s<', page) and "data-when" in page
