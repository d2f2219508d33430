"""The customer's "Try paying again", and an operator's own retry from the task page
(issue 15): who may start a new charge, how often, and who it is recorded as.

The page's three states and its links are tested with the operators' pages
(tests/agentops/test_operators.py); the browser's view of it in tests/browser/.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any
from unittest.mock import patch

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core import signing
from django.test import Client, override_settings

from agentops.runner import task_start
from commerce.customers.links import SALT, payment_link
from journal.leases import lease_acquire, lease_release
from journal.models import Entry, EntryKind, Task
from journal.outcomes import Outcome
from journal.perform import step_perform
from journal.protocols import Call, Finish
from journal.record import step_record, task_finish
from journal.settle import step_mark_unknown
from tests.agentops.workers import quiet_world
from tests.journal.support import ChargeTool, Provider, invoice

pytestmark = pytest.mark.usefixtures("committed")

READ_ONLY, ACTING = "Operators (read-only)", "Operators"


@pytest.fixture
def redis() -> Iterator[Any]:
    connection_ = quiet_world()
    yield connection_
    connection_.flushdb()


def operator(group: str) -> Any:
    made = get_user_model().objects.create_user(
        username=f"op-{uuid.uuid4().hex[:8]}", password="a-Long-enough-pass-1"
    )
    made.groups.add(Group.objects.get(name=group))
    return made


def signed_in(who: Any) -> Client:
    c = Client()
    c.force_login(who)
    return c


def charge_call(inv: str) -> Call:
    return Call(
        "charge_customer",
        {"invoice": inv, "amount": 4900, "currency": "usd", "payment_method": "pm_card_visa"},
    )


def renewal(inv: str, *, actor: str = "") -> Task:
    return task_start(
        kind="renewal",
        goal="renew",
        refs={"invoice": inv, "amount": 4900, "email": "ada@example.com"},
        actor=actor,
    )


def declined(inv: str) -> Task:
    """A renewal whose card was declined, over: no money taken, and the customer may retry."""
    task = renewal(inv)
    lease = lease_acquire(task_id=task.pk, owner="test")
    assert lease is not None
    tool = ChargeTool(Provider(), name="charge_customer", script=["refuse"])
    step = step_record(lease=lease, decision=charge_call(inv), tools={"charge_customer": tool})
    step_perform(lease=lease, step=step, tool=tool)
    task_finish(lease=lease, decision=Finish("declined"), summary="1 not done.")
    return task


def finish(task_id: Any) -> None:
    """The retry's run ends without charging (the card is declined again, say): the
    payment is certainly not done again, and the customer may try once more."""
    lease = lease_acquire(task_id=task_id, owner="test")
    assert lease is not None
    task_finish(lease=lease, decision=Finish("declined again"), summary="nothing charged")


def tasks_of(inv: str) -> int:
    return Task.objects.filter(refs__invoice=inv).count()


def newest(inv: str) -> Task:
    return Task.objects.filter(refs__invoice=inv).order_by("-created_at").first()  # type: ignore[return-value]


def started_by(task: Task) -> str:
    return Entry.objects.get(task=task, kind=EntryKind.TASK_CREATED).actor


def another_link(inv: str) -> str:
    """A second genuine link to the same invoice (signed a minute earlier, as another
    email would carry): a fresh link must not buy a fresh allowance."""
    earlier = signing.b62_encode(int(time.time()) - 60)
    with patch.object(signing.TimestampSigner, "timestamp", lambda self: earlier):
        token = signing.dumps({"invoice": inv}, salt=SALT, compress=True)
    link = f"/pay/{token}/"
    assert link != payment_link(inv)
    return link


# --- An operator's session on the customer's link --------------------------------------------


@pytest.mark.parametrize("group", [READ_ONLY, ACTING])
def test_an_operator_session_gets_the_customers_page_read_only_and_its_retry_refused(
    redis: Any, caplog: pytest.LogCaptureFixture, group: str
) -> None:
    inv = invoice()
    declined(inv)
    who = operator(group)
    c, link = signed_in(who), payment_link(inv)
    page = c.get(link).content.decode()
    assert "No money has been taken" in page  # the truth, as the customer sees it
    assert "Try paying again" not in page and 'method="post"' not in page
    assert "Retry payment" in page  # where an operator's retry is

    with caplog.at_level(logging.WARNING, logger="commerce.customers"):
        refused = c.post(link)
    assert refused.status_code == 403
    html = refused.content.decode()
    assert "would be recorded as the customer" in html  # the refusal, and why
    assert "“Retry payment” on the task page" in html and "Try paying again" not in html
    assert tasks_of(inv) == 1  # nothing started
    said = [r.getMessage() for r in caplog.records if r.name.startswith("commerce.customers")]
    assert any(who.username in m and inv in m for m in said), said
    # The customer, without a session, still has the button.
    assert "Try paying again" in Client().get(link).content.decode()


# --- An operator's own retry, from the task page ---------------------------------------------


def test_an_operator_retries_from_the_task_page_recorded_with_their_name_and_reason(
    redis: Any,
) -> None:
    inv = invoice()
    first = declined(inv)
    who = operator(ACTING)
    c = signed_in(who)
    assert ">Retry payment<" in c.get(f"/tasks/{first.pk}").content.decode()
    url = f"/tasks/{first.pk}/retry"
    assert "Confirm: retry payment" in c.get(url).content.decode()

    unsaid = c.post(url, {"reason": ""})
    assert unsaid.status_code == 200 and "This field is required" in unsaid.content.decode()
    assert tasks_of(inv) == 1

    done = c.post(url, {"reason": "the customer phoned: card unblocked"}, HTTP_HX_REQUEST="true")
    assert tasks_of(inv) == 2
    retry = newest(inv)
    assert done["HX-Redirect"] == f"/tasks/{retry.pk}"  # htmx goes to the new task
    assert retry.kind == "renewal" and retry.refs == first.refs
    assert started_by(retry) == who.username  # not "customer"
    action = Entry.objects.get(task=retry, kind=EntryKind.OPERATOR_ACTION)
    assert action.actor == who.username
    assert action.data["action"] == "retry_payment"
    assert action.data["reason"] == "the customer phoned: card unblocked"
    assert "the customer phoned: card unblocked" in c.get(f"/tasks/{retry.pk}").content.decode()
    # The customer is told to wait, and neither they nor the operator can start another.
    assert "We're checking" in Client().get(payment_link(inv)).content.decode()
    again = c.post(url, {"reason": "once more"})
    assert again.status_code == 409 and "not safe for this task now" in again.content.decode()
    assert tasks_of(inv) == 2
    # Without JavaScript: a redirect to the new task.
    finish(retry.pk)
    plain = c.post(url, {"reason": "second call from the customer"})
    assert tasks_of(inv) == 3 and plain.status_code == 302
    assert plain["Location"] == f"/tasks/{newest(inv).pk}"


def test_a_read_only_operator_can_not_retry_from_the_task_page(redis: Any) -> None:
    inv = invoice()
    first = declined(inv)
    c = signed_in(operator(READ_ONLY))
    assert ">Retry payment<" not in c.get(f"/tasks/{first.pk}").content.decode()
    assert c.get(f"/tasks/{first.pk}/retry").status_code == 403
    assert c.post(f"/tasks/{first.pk}/retry", {"reason": "let me"}).status_code == 403
    assert tasks_of(inv) == 1
    assert not Entry.objects.filter(task=first, kind=EntryKind.OPERATOR_ACTION).exists()


def test_retry_is_offered_on_the_task_page_only_when_the_payment_is_certainly_not_done(
    redis: Any,
) -> None:
    inv = invoice()
    running = renewal(inv)  # nothing charged yet, still in progress
    c = signed_in(operator(ACTING))
    assert ">Retry payment<" not in c.get(f"/tasks/{running.pk}").content.decode()
    refused = c.post(f"/tasks/{running.pk}/retry", {"reason": "why not"})
    assert refused.status_code == 409 and tasks_of(inv) == 1


# --- How often a customer may try ------------------------------------------------------------


@override_settings(CUSTOMER_RETRY_LIMIT=2, CUSTOMER_RETRY_WINDOW_SECONDS=3600)
def test_the_customers_retry_is_limited_per_link_and_per_invoice(redis: Any) -> None:
    inv = invoice()
    first = declined(inv)
    anyone, link = Client(), payment_link(inv)
    for _ in range(2):
        assert anyone.post(link).status_code == 302
        assert started_by(newest(inv)) == "customer"
        finish(newest(inv).pk)  # declined again: the page offers the button again
    assert "Try paying again" in anyone.get(link).content.decode()

    throttled = anyone.post(link)  # the same link, a third time within the window
    assert throttled.status_code == 429
    assert "try again after" in throttled.content.decode().lower()
    assert 0 < int(throttled["Retry-After"]) <= 3600
    assert tasks_of(inv) == 3
    # Another link to the same invoice is the same invoice: no fresh allowance.
    assert Client().post(another_link(inv)).status_code == 429
    assert tasks_of(inv) == 3
    # Another invoice has its own.
    other = invoice()
    declined(other)
    assert anyone.post(payment_link(other)).status_code == 302

    # An operator's retry is theirs, permissioned and recorded: not the customer's count.
    op = operator(ACTING)
    helped = signed_in(op).post(f"/tasks/{first.pk}/retry", {"reason": "customer phoned"})
    assert helped.status_code == 302 and started_by(newest(inv)) == op.username
    finish(newest(inv).pk)
    assert anyone.post(link).status_code == 429  # the customer's count is unchanged

    # The window is a setting: once it has passed, the customer may try again.
    with override_settings(CUSTOMER_RETRY_WINDOW_SECONDS=0):
        assert anyone.post(link).status_code == 302
    assert started_by(newest(inv)) == "customer"


# --- A retry while the payment may still happen ----------------------------------------------


def _assert_checking(inv: str) -> None:
    before = tasks_of(inv)
    response = Client().post(payment_link(inv))
    html = response.content.decode()
    assert response.status_code == 409
    assert "We're checking" in html and "Please don't pay again" in html
    assert "Try paying again" not in html and "No money has been taken" not in html
    assert tasks_of(inv) == before


def test_a_retry_while_a_charge_is_in_flight_or_unknown_shows_checking(redis: Any) -> None:
    # In flight: recorded and sent, no answer yet.
    inv = invoice()
    task = renewal(inv)
    lease = lease_acquire(task_id=task.pk, owner="test")
    assert lease is not None
    tool = ChargeTool(Provider(), name="charge_customer")
    step_record(lease=lease, decision=charge_call(inv), tools={"charge_customer": tool})
    _assert_checking(inv)
    # Unknown: the call timed out; the task waits for its next lookup.
    inv = invoice()
    task = renewal(inv)
    lease = lease_acquire(task_id=task.pk, owner="test")
    assert lease is not None
    step = step_record(lease=lease, decision=charge_call(inv), tools={"charge_customer": tool})
    step_mark_unknown(
        lease=lease, step=step, outcome=Outcome.unknown("timed out"), next_check_in=3600
    )
    lease_release(lease)
    assert Task.objects.get(pk=task.pk).status == "waiting"
    _assert_checking(inv)


def test_a_retry_while_a_renewal_for_the_invoice_is_in_progress_shows_checking(
    redis: Any,
) -> None:
    inv = invoice()
    declined(inv)
    renewal(inv, actor="someone")  # a renewal started since, not yet charging
    _assert_checking(inv)
