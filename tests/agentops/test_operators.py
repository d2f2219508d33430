"""The operators' pages through Django's test client: access, actions, polling, cost (issue 10).

Browser behaviour (htmx swaps, polling in a real page) is in tests/browser/.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import django_rq
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.db.models.functions import Now
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext

from agentops.effects import task_start
from agentops.operators.services import task_cancel
from commerce.customers.links import payment_link, payment_token
from journal.entries import note
from journal.leases import lease_acquire, lease_release
from journal.models import Attention, Entry, EntryKind, Step, Task
from journal.outcomes import Outcome
from journal.perform import step_perform
from journal.record import step_record, task_create
from journal.run import task_advance
from journal.settle import step_mark_unknown, step_noted, step_settle
from journal.status import task_flag
from tests.agentops.workers import apply_decisions, quiet_world
from tests.databases import flag
from tests.journal.support import ChargeTool, Provider, ScriptedPlanner, charge, invoice

pytestmark = pytest.mark.usefixtures("committed")


def user(*groups: str, perms: tuple[str, ...] = ()) -> Any:
    made = get_user_model().objects.create_user(
        username=f"op-{uuid.uuid4().hex[:8]}", password="a-Long-enough-pass-1"
    )
    for name in groups:
        made.groups.add(Group.objects.get(name=name))
    for codename in perms:
        made.user_permissions.add(Permission.objects.get(codename=codename))
    return made


def client_for(who: Any, **kw: Any) -> Client:
    c = Client(**kw)
    c.force_login(who)
    return c


@pytest.fixture
def redis() -> Iterator[Any]:
    connection_ = quiet_world()
    yield connection_
    connection_.flushdb()


def renewal(**refs: Any) -> Task:
    inv = refs.pop("invoice", invoice())
    return task_start(
        kind="renewal",
        goal="renew",
        refs={"invoice": inv, "amount": 4900, "email": "ada@example.com", **refs},
    )


def unknown_step(task: Task | None = None, *, flagged: bool = False) -> Step:
    """A charge whose call timed out: unknown, its task waiting (or handed to a person)."""
    task = task or task_create(kind="renewal", goal="charge", refs={"invoice": invoice()})
    lease = lease_acquire(task_id=task.pk, owner="test")
    assert lease is not None
    step = step_record(
        lease=lease, decision=charge(invoice()), tools={"charge": ChargeTool(Provider())}
    )
    step_mark_unknown(
        lease=lease, step=step, outcome=Outcome.unknown("timed out"), next_check_in=3600
    )
    if flagged:
        task_flag(
            lease=lease,
            code=Attention.KEY_DEAD,
            reason="key died",
            step_id=step.pk,
        )
    lease_release(lease)
    return Step.objects.get(pk=step.pk)


# --- Access -----


def test_everything_needs_a_login_but_the_open_doors() -> None:
    anonymous = Client()
    task = renewal()
    for path in ("/", f"/tasks/{task.pk}", "/tasks/new", f"/tasks/{task.pk}/resume"):
        response = anonymous.get(path)
        assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert anonymous.get("/login/").status_code == 200
    assert anonymous.get(payment_link(task.refs["invoice"])).status_code == 200
    assert (
        anonymous.post("/webhooks/stripe", data=b"{}", content_type="application/json").status_code
        == 400
    )
    assert anonymous.get("/healthz").status_code in (200, 503)


def test_the_pages_carry_a_content_security_policy_they_satisfy() -> None:
    viewer = client_for(user("Operators (read-only)"))
    task = renewal()
    for path in ("/", f"/tasks/{task.pk}"):
        response = viewer.get(path)
        policy = response["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "style-src 'self'" in policy
        html = response.content.decode()
        # No inline script or style for the policy to forbid: only files from this site.
        assert not re.search(r"<script(?![^>]*\bsrc=)", html)
        assert "<style" not in html and " style=" not in html
        assert 'allowEval": false' in html


def test_a_read_only_operator_sees_no_button_and_gets_403_from_every_action(redis: Any) -> None:
    viewer = client_for(user("Operators (read-only)"))
    step = unknown_step(flagged=True)
    page = viewer.get(f"/tasks/{step.task_id}").content.decode()
    assert "needs a person" in page.lower() or "Needs a person" in page
    for label in ("Reconcile now", "Resolve manually", "Resume", "Cancel", "Compensate"):
        assert f">{label}<" not in page
    for action in ("resume", "cancel", "compensate", "approve", "reject"):
        assert viewer.get(f"/tasks/{step.task_id}/{action}").status_code == 403
        assert viewer.post(f"/tasks/{step.task_id}/{action}", {"reason": "x"}).status_code == 403
    for action in ("reconcile", "resolve"):
        url = f"/tasks/{step.task_id}/steps/{step.n}/{action}"
        assert (
            viewer.post(url, {"reason": "x", "outcome": "done", "evidence": "ch_1"}).status_code
            == 403
        )
    assert viewer.post("/tasks/reconcile", {"all": "matching", "confirmed": "1"}).status_code == 403
    assert viewer.get("/tasks/new").status_code == 403
    assert not Entry.objects.filter(task_id=step.task_id, kind=EntryKind.OPERATOR_ACTION).exists()


def test_a_login_without_the_view_permission_sees_no_task(redis: Any) -> None:
    step = unknown_step(flagged=True)
    stranger = client_for(user())
    assert stranger.get("/").status_code == 403
    assert stranger.get(f"/tasks/{step.task_id}").status_code == 403
    assert stranger.get(f"/tasks/{step.task_id}/resume").status_code == 403
    assert client_for(user(perms=("view_task",))).get(f"/tasks/{step.task_id}").status_code == 200


def test_each_permission_opens_its_own_buttons_only(redis: Any) -> None:
    step = unknown_step(flagged=True)
    reconciler = client_for(user(perms=("view_task", "reconcile_step")))
    page = reconciler.get(f"/tasks/{step.task_id}").content.decode()
    assert ">Reconcile now<" in page and ">Resolve manually<" not in page and ">Resume<" not in page
    assert reconciler.post(f"/tasks/{step.task_id}/resume", {"reason": "x"}).status_code == 403


def test_a_post_without_its_csrf_token_is_refused(redis: Any) -> None:
    step = unknown_step(flagged=True)
    strict = client_for(user("Operators"), enforce_csrf_checks=True)
    response = strict.post(f"/tasks/{step.task_id}/resume", {"reason": "checked"})
    assert response.status_code == 403
    assert Task.objects.get(pk=step.task_id).status == "needs_human"


# --- Actions -----


def test_resume_asks_a_reason_and_records_who_and_why(redis: Any) -> None:
    operator = user("Operators")
    c = client_for(operator)
    step = unknown_step(flagged=True)
    confirm = c.get(f"/tasks/{step.task_id}/resume")
    assert "Let this task go on from where it is?" in confirm.content.decode()
    refused = c.post(f"/tasks/{step.task_id}/resume", {"reason": ""})
    assert refused.status_code == 200 and "This field is required" in refused.content.decode()
    assert Task.objects.get(pk=step.task_id).status == "needs_human"
    done = c.post(
        f"/tasks/{step.task_id}/resume", {"reason": "provider checked", "next": "/?state=attention"}
    )
    assert done.status_code == 302 and done["Location"] == "/?state=attention"  # back to the view
    action = Entry.objects.get(task_id=step.task_id, kind=EntryKind.OPERATOR_ACTION)
    assert action.actor == operator.username and action.data["reason"] == "provider checked"
    assert Task.objects.get(pk=step.task_id).status == "runnable"


def test_reconcile_now_makes_the_lookup_due_wakes_the_task_and_rings(redis: Any) -> None:
    c = client_for(user("Operators"))
    step = unknown_step()
    assert Task.objects.get(pk=step.task_id).status == "waiting"
    response = c.post(f"/tasks/{step.task_id}/steps/{step.n}/reconcile", {}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    html = response.content.decode()
    # The whole task: its row, and the banner, history and actions the action changed.
    assert 'id="task-body"' in html and f'id="step-{step.n}"' in html and 'id="task-head"' in html
    fresh = Step.objects.select_related("task").get(pk=step.pk)
    assert fresh.task.status == "runnable"
    assert Step.objects.filter(pk=step.pk, next_check_at__lte=Now()).exists()  # due now
    jobs = [j.args[0] for j in django_rq.get_queue("default").get_jobs()]
    assert str(step.task_id) in jobs
    assert Entry.objects.filter(
        step=step, kind=EntryKind.OPERATOR_ACTION, data__action="reconcile"
    ).exists()


def test_a_step_nobody_can_settle_is_resolved_by_hand_with_its_evidence(redis: Any) -> None:
    c = client_for(user("Operators"))
    step = unknown_step(flagged=True)
    url = f"/tasks/{step.task_id}/steps/{step.n}/resolve"
    missing = c.post(url, {"outcome": "done", "evidence": "", "reason": "seen in dashboard"})
    assert "Give the evidence you found" in missing.content.decode()
    c.post(url, {"outcome": "done", "evidence": "ch_found_1", "reason": "seen in dashboard"})
    assert Step.objects.get(pk=step.pk).state == "unknown"  # decided: a worker applies it
    assert apply_decisions(step.task_id) == ["settled done by hand"]
    settled = Step.objects.get(pk=step.pk)
    assert settled.state == "done" and settled.evidence["reference"] == "ch_found_1"
    # Not on a step that is settled, nor on a task that does not need a person.
    again = c.post(url, {"outcome": "not_done", "reason": "x"})
    assert "not safe for this task now" in again.content.decode()


def test_an_action_refused_by_the_journal_says_why_and_changes_nothing(redis: Any) -> None:
    c = client_for(user("Operators"))
    step = unknown_step(flagged=True)
    response = c.post(f"/tasks/{step.task_id}/cancel", {"reason": "stop"})
    assert response.status_code == 409
    assert "it may have happened; reconcile it or resolve it by hand" in response.content.decode()
    assert Task.objects.get(pk=step.task_id).status == "needs_human"


def test_bulk_reconcile_confirms_without_javascript_and_keeps_the_view(redis: Any) -> None:
    c = client_for(user("Operators"))
    a, b = unknown_step(), unknown_step()
    page = c.post("/tasks/reconcile", {"task": [str(a.task_id)], "state": "unknown"})
    assert page.status_code == 200 and "Confirm: reconcile now" in page.content.decode()
    assert "the 1 selected task at" in page.content.decode()
    assert Task.objects.get(pk=a.task_id).status == "waiting"  # nothing yet
    done = c.post(
        "/tasks/reconcile", {"task": [str(a.task_id)], "state": "unknown", "confirmed": "1"}
    )
    assert done.status_code == 302 and done["Location"] == "/?state=unknown"
    assert Task.objects.get(pk=a.task_id).status == "runnable"
    assert Task.objects.get(pk=b.task_id).status == "waiting"
    c.post("/tasks/reconcile", {"all": "matching", "q": str(b.task_id), "confirmed": "1"})
    assert Task.objects.get(pk=b.task_id).status == "runnable"


# --- The list -----


def test_the_list_filters_searches_and_counts(redis: Any) -> None:
    c = client_for(user("Operators (read-only)"))
    flagged = unknown_step(flagged=True)
    inv = invoice()
    mine = renewal(invoice=inv)
    assert str(mine.pk) in c.get(f"/?q={inv}").content.decode()
    assert str(mine.pk) in c.get(f"/?q={inv.lower()}").content.decode()
    assert str(flagged.task_id) in c.get(f"/?q={flagged.key}").content.decode()
    assert str(flagged.task_id) in c.get(f"/?q={flagged.task_id}").content.decode()
    attention = c.get("/?state=attention").content.decode()
    assert str(flagged.task_id) in attention and str(mine.pk) not in attention
    running = c.get("/?state=running").content.decode()
    assert str(mine.pk) in running
    counts = c.get("/").content.decode()
    assert re.search(r"needs attention <b>\d+</b>", counts)


def test_polling_answers_204_when_nothing_changed_and_286_when_nothing_is_in_flight(
    redis: Any,
) -> None:
    c = client_for(user("Operators (read-only)"))
    step = unknown_step()
    first = c.get(f"/tasks/{step.task_id}", HTTP_HX_REQUEST="true")
    fp = re.search(r"fp=([0-9a-f]+)", first.content.decode()).group(1)  # type: ignore[union-attr]
    assert c.get(f"/tasks/{step.task_id}?fp={fp}", HTTP_HX_REQUEST="true").status_code == 204
    # The provider's webhook settles it: the page changed, and the task is live again.
    step_settle(step_id=step.pk, outcome=Outcome.done({"id": "ch_x"}), via="webhook")
    changed = c.get(f"/tasks/{step.task_id}?fp={fp}", HTTP_HX_REQUEST="true")
    assert changed.status_code == 200 and "ch_x" in changed.content.decode()
    # With a person, it keeps polling: a webhook or a colleague may still settle a step.
    task = Task.objects.get(pk=step.task_id)
    flag(task.pk, "parked", "done watching")
    assert c.get(f"/tasks/{step.task_id}?fp={fp}", HTTP_HX_REQUEST="true").status_code == 200
    # Over: the last answer stops the polling.
    task_cancel(task_id=task.pk, actor="ops", reason="nothing more to do")
    assert c.get(f"/tasks/{step.task_id}?fp={fp}", HTTP_HX_REQUEST="true").status_code == 286


# --- Starting a task -----


def test_a_task_started_from_the_browser_is_checked_like_start_task(redis: Any) -> None:
    c = client_for(user("Operators"))
    form = c.get("/tasks/new?kind=renewal").content.decode()
    for field in ("invoice", "amount", "email", "currency"):
        assert f'name="{field}"' in form
    before = Task.objects.count()
    bad = c.post(
        "/tasks/new",
        {"kind": "renewal", "goal": "renew", "invoice": "INV 1", "amount": "4900", "email": "nope"},
    )
    html = bad.content.decode()
    assert bad.status_code == 400 and Task.objects.count() == before
    assert 'data-field="invoice"' in html and 'data-field="email"' in html
    inv = invoice()
    good = c.post(
        "/tasks/new",
        {"kind": "renewal", "goal": "renew", "invoice": inv, "amount": "4900", "email": "a@b.co"},
    )
    task = Task.objects.get(refs__invoice=inv)
    assert good.status_code == 302 and good["Location"] == f"/tasks/{task.pk}"
    assert Entry.objects.get(task=task, kind=EntryKind.TASK_CREATED).actor.startswith("op-")


# --- The cost of a page -----


def _queries(c: Client, path: str) -> int:
    with CaptureQueriesContext(connection) as seen:
        assert c.get(path).status_code == 200
    return len(seen.captured_queries)


def test_the_list_and_a_task_page_cost_the_same_queries_whatever_their_size() -> None:
    c = client_for(user("Operators"))
    c.get("/")  # session and permission caches warm
    small = _queries(c, "/")
    for _ in range(30):
        task_create(kind="renewal", goal="more", refs={"invoice": invoice()})
    assert _queries(c, "/") == small

    def task_with(steps: int) -> Task:
        task = task_create(kind="renewal", goal="long", refs={"invoice": invoice()})
        lease = lease_acquire(task_id=task.pk, owner="t")
        assert lease is not None
        tool = ChargeTool(Provider())
        for _ in range(steps):
            step = step_record(lease=lease, decision=charge(invoice()), tools={"charge": tool})
            step_settle(step_id=step.pk, outcome=Outcome.done({"id": "x"}), via="t", lease=lease)
        return task

    short, long_ = task_with(2), task_with(200)
    assert _queries(c, f"/tasks/{short.pk}") == _queries(c, f"/tasks/{long_.pk}")


def test_text_from_outside_is_escaped_in_the_timeline_and_the_arguments() -> None:
    """A webhook's type, a lookup's result and a model's arguments come from outside; the
    page draws them as text (the timeline is built in Python, not by the template)."""
    step = unknown_step()
    evil = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    step_noted(
        step_id=step.pk,
        notes=[note(EntryKind.WEBHOOK_RECEIVED, type=evil), note(EntryKind.LOOKUP, result=evil)],
    )
    html = client_for(user("Operators")).get(f"/tasks/{step.task_id}").content.decode()
    assert evil not in html and "<img src=x" not in html and "<script>alert" not in html
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 4  # two titles, two captions


# --- The customer's page -----


def test_a_tampered_or_expired_customer_link_is_a_plain_404() -> None:
    task = renewal()
    token = payment_token(task.refs["invoice"])
    forged = token[:-3] + ("aaa" if not token.endswith("aaa") else "bbb")
    response = Client().get(f"/pay/{forged}/")
    assert response.status_code == 404 and b"Traceback" not in response.content
    assert Client().get(f"/pay/{payment_token('INV-NOBODY-KNOWS')}/").status_code == 404
    with override_settings(CUSTOMER_LINK_MAX_AGE_DAYS=-1):
        assert Client().get(f"/pay/{token}/").status_code == 404


def test_the_customer_page_shows_three_states_and_pays_again_only_when_not_done(
    redis: Any,
) -> None:
    inv = invoice()
    task = renewal(invoice=inv)
    anyone = Client()
    link = payment_link(inv)
    # In progress (nothing charged yet): being checked, no pay button.
    page = anyone.get(link).content.decode()
    assert "We're checking" in page and "Pay with another card" not in page
    assert anyone.post(link).status_code == 409  # the block holds on the server
    assert Task.objects.filter(refs__invoice=inv).count() == 1
    for private in (str(task.pk), "ao:", "needs_human", "runnable"):
        assert private not in page
    # Declined: no money taken, and a new attempt may start.
    lease = lease_acquire(task_id=task.pk, owner="t")
    assert lease is not None
    decline = ChargeTool(Provider(), name="charge_customer", script=["refuse"])
    step = step_record(
        lease=lease,
        decision=charge_call(inv),
        tools={"charge_customer": decline},
    )
    from journal.perform import step_perform
    from journal.protocols import Finish
    from journal.record import task_finish

    step_perform(lease=lease, step=step, tool=decline)
    task_finish(lease=lease, decision=Finish("declined"), summary="1 not done.")
    page = anyone.get(link).content.decode()
    assert "No money has been taken" in page and "Pay with another card" in page
    another = {"payment_method": "pm_card_mastercard"}
    assert anyone.post(link, another).status_code == 302
    assert Task.objects.filter(refs__invoice=inv).count() == 2
    # Two tabs: the second finds a payment under way and is refused.
    assert anyone.post(link, another).status_code == 409
    assert Task.objects.filter(refs__invoice=inv).count() == 2


def test_a_payment_a_held_or_flagged_task_may_still_make_is_never_shown_as_not_paid(
    redis: Any,
) -> None:
    """A task a person is looking at (or that waits for approval) can still charge once
    they let it go on: the customer is asked to wait, and cannot start another payment."""
    inv = invoice()
    task = renewal(invoice=inv)
    flag(task.pk, "planner_failed", "the model was down")
    anyone = Client()
    link = payment_link(inv)
    page = anyone.get(link).content.decode()
    assert "We're checking" in page and "No money has been taken" not in page
    assert anyone.post(link).status_code == 409
    assert Task.objects.filter(refs__invoice=inv).count() == 1


def charge_call(inv: str) -> Any:
    from journal.protocols import Call

    return Call(
        "charge_customer",
        {"invoice": inv, "amount": 4900, "currency": "usd", "payment_method": "pm_card_visa"},
    )


def test_a_task_that_ended_short_is_listed_as_failed_with_its_summary_saying_why(
    redis: Any,
) -> None:
    c = client_for(user("Operators (read-only)"))
    task = task_create(kind="renewal", goal="declined", refs={"invoice": invoice()})
    lease = lease_acquire(task_id=task.pk, owner="t")
    assert lease is not None
    refused = ChargeTool(Provider(), script=["refuse"])
    step = step_record(lease=lease, decision=charge(invoice()), tools={"charge": refused})
    step_perform(lease=lease, step=step, tool=refused)
    lease_release(lease)
    # The planner finishes; the journal knows the charge did not happen.
    task_advance(task_id=task.pk, planner=ScriptedPlanner([charge(invoice())]), tools={})
    finished = Task.objects.get(pk=task.pk)
    assert finished.status == "finished" and finished.shortfall is True
    listed = c.get("/?state=failed").content.decode()
    assert str(task.pk) in listed and "not all done" in listed
    assert str(task.pk) not in c.get("/?state=finished").content.decode()
    assert "not all done" in c.get(f"/tasks/{task.pk}").content.decode()


def test_a_reminder_batch_is_listed_by_its_first_invoice_and_how_many_more() -> None:
    first, second, third = invoice(), invoice(), invoice()
    batch = [{"invoice": i, "email": "a@example.com"} for i in (first, second, third)]
    task_create(kind="reminders", goal="remind", refs={"invoices": batch})
    listed = client_for(user("Operators (read-only)")).get(f"/?q={first}").content.decode()
    assert f"{first} +2" in listed
