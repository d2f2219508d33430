"""The customer's "Pay with another card" (issues 15 and 21), and an operator's own retry
from the task page: who may start a new charge, with which card, how often, and who it is
recorded as; what the page says (the decline in words, a cancelled trip, a link that no
longer works), and the link in the customer's emails.

The page's three states and its links are tested with the operators' pages
(tests/agentops/test_operators.py); the browser's view of it in tests/browser/.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from unittest.mock import patch

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core import signing
from django.test import Client, override_settings

from agentops.audit.models import AuditRun, Finding, FindingKind
from agentops.effects import task_start
from agentops.kinds import planner_bound, rules_for
from agentops.planners.scripted import ScriptedPlanner
from commerce import playbooks
from commerce.customers.dates import date_text, reader_order
from commerce.customers.links import SALT, link_of, payment_link, payment_token
from commerce.customers.services import CARD_REFUSED, LINK_ANSWER, LINK_LIMIT, LINK_REQUESTED
from commerce.kinds import KINDS
from journal.leases import lease_acquire, lease_release
from journal.models import Entry, EntryKind, Step, Task
from journal.operator import task_cancel
from journal.outcomes import Outcome, Reply, StepState
from journal.perform import step_perform
from journal.protocols import Call, Finish, StepFact, TaskFacts
from journal.record import step_record, task_finish
from journal.selectors import task_facts_by_id
from journal.settle import step_mark_unknown
from tests.agentops.workers import quiet_world
from tests.databases import flag
from tests.journal.support import ChargeTool, Provider, invoice

pytestmark = pytest.mark.usefixtures("committed")

KINDS_BY_NAME = {kind.name: kind for kind in KINDS}

READ_ONLY, ACTING = "Operators (read-only)", "Operators"
# The declined renewals below were charged to pm_card_visa; the customer chooses another.
ANOTHER_CARD = {"payment_method": "pm_card_mastercard"}


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


class Declines(ChargeTool):
    """A card declined with the provider's ``code`` (Stripe's decline_code)."""

    code: str = "card_declined"

    def guard(self, args: Any) -> str:
        return f"charge:{args['invoice']}"  # as commerce's charge_customer names it

    def call(self, args: Any, *, key: str) -> Any:
        return Reply(402, code=self.code, message="declined")


def declined(inv: str, code: str = "card_declined") -> Task:
    """A renewal whose card was declined, over: no money taken, and the customer may retry."""
    task = renewal(inv)
    lease = lease_acquire(task_id=task.pk, owner="test")
    assert lease is not None
    tool = Declines(Provider(), name="charge_customer")
    tool.code = code
    step = step_record(lease=lease, decision=charge_call(inv), tools={"charge_customer": tool})
    step_perform(lease=lease, step=step, tool=tool)
    task_finish(lease=lease, decision=Finish("declined"), summary="1 not done.")
    return task


class Pays(ChargeTool):
    """A charge the provider accepts at once, with Stripe's evidence."""

    def guard(self, args: Any) -> str:
        return f"charge:{args['invoice']}"

    def call(self, args: Any, *, key: str) -> Any:
        ids = {"id": f"pi_{key[-6:]}", "payment_intent": f"pi_{key[-6:]}", "charge": "ch_test1"}
        return Reply(200, evidence=ids)


class Refunds(ChargeTool):
    """The provider refunds the payment whole, with Stripe's evidence."""

    def call(self, args: Any, *, key: str) -> Any:
        refund = {"id": "re_test1", "refund": "re_test1", "currency": "usd"}
        return Reply(200, evidence={**refund, "amount": args["amount"]})


def paid(inv: str, *, refunded: bool = False, cancelled: bool = False) -> Task:
    """A renewal that charged the invoice (and, with ``refunded``, whose charge the journal's
    own keyed undo refunded whole), over: finished, or ``cancelled`` by an operator."""
    task = renewal(inv)
    lease = lease_acquire(task_id=task.pk, owner="test")
    assert lease is not None
    provider = Provider()
    tool = Pays(provider, name="charge_customer", compensation="refund_charge")
    refund = Refunds(provider, name="refund_charge")
    tools: dict[str, Any] = {"charge_customer": tool, "refund_charge": refund}
    step = step_record(lease=lease, decision=charge_call(inv), tools=tools)
    step_perform(lease=lease, step=step, tool=tool)
    if refunded:
        target = task_facts_by_id(task_id=task.pk).steps[0]
        undo = step_record(
            lease=lease,
            decision=Call("refund_charge", tool.undo_args(target.args, target.evidence)),
            tools=tools,
            undo_of=target,
        )
        step_perform(lease=lease, step=undo, tool=refund)
    if cancelled:
        lease_release(lease)
        called_off(task)
        return task
    task_finish(lease=lease, decision=Finish("paid"), summary="1 done.")
    return task


def refunded_at_the_provider(task: Task, amount: int) -> Finding:
    """What the provider audit finds when someone refunded ``amount`` of the task's charge in
    the provider's dashboard (as agentops/audit stores it, commerce/audits.py's raw)."""
    charge = Step.objects.get(task=task, tool="charge_customer")
    run = AuditRun.objects.create(
        provider="stripe", trigger="command", since=charge.created_at, until=charge.created_at
    )
    return Finding.objects.create(
        provider="stripe",
        kind=FindingKind.OFFSET_UNKNOWN,
        effect_id=str(charge.evidence["payment_intent"]),
        key=charge.key,
        task_id=task.pk,
        step_id=charge.pk,
        run=run,
        summary=f"refunded {amount} usd at stripe, and the journal knows no undo of it",
        provider_side={"offset": f"refunded {amount} usd", "raw": {"amount_refunded": amount}},
    )


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
    assert "Pay with another card" not in page and 'method="post"' not in page
    assert "Retry payment" in page  # where an operator's retry is

    with caplog.at_level(logging.WARNING, logger="commerce.customers"):
        refused = c.post(link, ANOTHER_CARD)
    assert refused.status_code == 403
    html = refused.content.decode()
    assert "would be recorded as the customer" in html  # the refusal, and why
    assert "“Retry payment” on the task page" in html and "Pay with another card" not in html
    assert tasks_of(inv) == 1  # nothing started
    said = [r.getMessage() for r in caplog.records if r.name.startswith("commerce.customers")]
    assert any(who.username in m and inv in m for m in said), said
    # The customer, without a session, still has the form.
    assert "Pay with another card" in Client().get(link).content.decode()


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
        assert anyone.post(link, ANOTHER_CARD).status_code == 302
        assert started_by(newest(inv)) == "customer"
        finish(newest(inv).pk)  # declined again: the page offers the form again
    assert "Pay with another card" in anyone.get(link).content.decode()

    throttled = anyone.post(link, ANOTHER_CARD)  # the same link, a third time within the window
    assert throttled.status_code == 429
    assert "try again after" in throttled.content.decode().lower()
    assert 0 < int(throttled["Retry-After"]) <= 3600
    assert tasks_of(inv) == 3
    # Another link to the same invoice is the same invoice: no fresh allowance.
    assert Client().post(another_link(inv), ANOTHER_CARD).status_code == 429
    assert tasks_of(inv) == 3
    # Another invoice has its own.
    other = invoice()
    declined(other)
    assert anyone.post(payment_link(other), ANOTHER_CARD).status_code == 302

    # An operator's retry is theirs, permissioned and recorded: not the customer's count.
    op = operator(ACTING)
    helped = signed_in(op).post(f"/tasks/{first.pk}/retry", {"reason": "customer phoned"})
    assert helped.status_code == 302 and started_by(newest(inv)) == op.username
    finish(newest(inv).pk)
    assert anyone.post(link, ANOTHER_CARD).status_code == 429  # the customer's count is unchanged

    # The window is a setting: once it has passed, the customer may try again.
    with override_settings(CUSTOMER_RETRY_WINDOW_SECONDS=0):
        assert anyone.post(link, ANOTHER_CARD).status_code == 302
    assert started_by(newest(inv)) == "customer"


# --- A retry while the payment may still happen ----------------------------------------------


def _assert_checking(inv: str) -> None:
    before = tasks_of(inv)
    response = Client().post(payment_link(inv), ANOTHER_CARD)
    html = response.content.decode()
    assert response.status_code == 409
    assert "We're checking" in html and "Please don't pay again" in html
    assert "Pay with another card" not in html and "No money has been taken" not in html
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


# --- Another card: the customer's choice, checked --------------------------------------------


def test_the_customer_pays_with_another_card_through_a_new_renewal_recorded_as_theirs(
    redis: Any,
) -> None:
    inv = invoice()
    first = declined(inv)
    link = payment_link(inv, first.pk)  # once: a token made in the next second differs
    response = Client().post(link, ANOTHER_CARD)
    assert response.status_code == 302 and response["Location"] == link
    retry = newest(inv)
    assert retry.pk != first.pk and retry.kind == "renewal"
    assert retry.refs == {**first.refs, "payment_method": "pm_card_mastercard"}
    assert started_by(retry) == "customer"
    # The page now says it is being checked, and offers no second payment.
    page = Client().get(payment_link(inv, first.pk)).content.decode()
    assert "We're checking" in page and "Pay with another card" not in page


@pytest.mark.parametrize(
    ("card", "said"),
    [
        ("", "Please choose the card to pay with."),
        ("pm_card_visa", "That is the card that was just declined."),
        ("4242 4242 4242 4242", "That is not a card we can charge"),
        ("tok_visa", "That is not a card we can charge"),
        ("pm_card_visa<script>", "That is not a card we can charge"),
    ],
)
def test_a_card_the_page_cannot_charge_is_refused_with_a_sentence_and_recorded(
    redis: Any, card: str, said: str
) -> None:
    inv = invoice()
    first = declined(inv)  # charged to pm_card_visa, declined
    response = Client().post(payment_link(inv), {"payment_method": card})
    html = response.content.decode()
    assert response.status_code == 409
    assert said in html and "<script>" not in html
    assert 'role="alert"' in html and "Pay with another card" in html  # the form, again
    assert tasks_of(inv) == 1  # nothing started, nothing charged
    refusal = Entry.objects.get(task=first, kind=EntryKind.OPERATOR_ACTION)
    assert refusal.actor == "customer" and refusal.data["action"] == CARD_REFUSED
    assert refusal.data["reason"].startswith(said) and refusal.data["payment_method"] == card


@override_settings(CUSTOMER_RETRY_LIMIT=2, CUSTOMER_RETRY_WINDOW_SECONDS=3600)
def test_refused_cards_count_as_tries_so_refusals_are_not_recorded_without_end(
    redis: Any,
) -> None:
    inv = invoice()
    first = declined(inv)
    link = payment_link(inv)
    for _ in range(2):
        assert Client().post(link, {"payment_method": "nonsense"}).status_code == 409
    throttled = Client().post(link, ANOTHER_CARD)
    assert throttled.status_code == 429 and "Retry-After" in throttled
    assert tasks_of(inv) == 1
    assert Entry.objects.filter(task=first, kind=EntryKind.OPERATOR_ACTION).count() == 2


def test_the_same_card_may_be_tried_again_when_the_bank_failed_to_process_it(
    redis: Any,
) -> None:
    inv = invoice()
    declined(inv, code="processing_error")
    page = Client().get(payment_link(inv)).content.decode()
    assert "Something went wrong at your bank" in page and "try the same card again" in page
    assert Client().post(payment_link(inv), {"payment_method": "pm_card_visa"}).status_code == 302


# --- What the page says ----------------------------------------------------------------------


def called_off(task: Task) -> None:
    """An operator cancels the task (one needing a person, as cancelling requires)."""
    flag(task.pk, "planner_failed", "the model was down")
    task_cancel(task_id=task.pk, actor="op", reason="the customer left")


@pytest.mark.parametrize(
    ("code", "words"),
    [
        ("insufficient_funds", "Your card does not have enough funds for this payment."),
        ("expired_card", "Your card has expired."),
        ("incorrect_cvc", "security code"),
        ("card_declined", "Your bank declined the payment without telling us why."),
        # Told as the bank's refusal: the page gives a thief no hint.
        ("stolen_card", "Your bank declined the payment without telling us why."),
        ("something_new", "The payment did not go through."),
    ],
)
def test_the_decline_is_told_in_the_customers_words(redis: Any, code: str, words: str) -> None:
    inv = invoice()
    declined(inv, code=code)
    page = Client().get(payment_link(inv)).content.decode()
    assert words in page and "No money has been taken" in page
    assert code not in page  # the provider's code is ours, not the customer's
    assert "49.00" in page and settings.MERCHANT_EMAIL in page


def test_a_cancelled_renewal_says_nothing_is_owed_and_offers_no_payment(redis: Any) -> None:
    inv = invoice()
    task = renewal(inv)
    called_off(task)
    response = Client().get(payment_link(inv, task.pk))
    page = response.content.decode()
    assert response.status_code == 200
    assert "This payment was cancelled" in page and "Nothing is owed" in page
    assert "No money has been taken" in page and "Cancelled on" in page
    assert "contact us to pay" not in page.lower() and 'method="post"' not in page
    refused = Client().post(payment_link(inv, task.pk), ANOTHER_CARD)
    assert refused.status_code == 409 and "nothing is owed" in refused.content.decode()
    assert tasks_of(inv) == 1


def test_a_charge_the_journal_refunded_says_refunded_with_the_amount(redis: Any) -> None:
    inv = invoice()
    task = paid(inv, refunded=True)
    page = Client().get(payment_link(inv, task.pk)).content.decode()
    assert '<h1 id="payment-title">Refunded</h1>' in page
    assert "Your payment of 49.00 USD was refunded in full" in page
    assert "Thank you" not in page and "didn't go through" not in page
    assert "Receipt reference: <code>ch_test1</code>" in page


@pytest.mark.parametrize(
    ("amount", "title", "words"),
    [
        (4900, "Refunded", "Your payment of 49.00 USD was refunded in full"),
        (1900, "Refunded in part", "19.00 USD of your payment of 49.00 USD was refunded"),
    ],
)
def test_a_charge_refunded_at_the_provider_says_refunded_once_the_audit_finds_it(
    redis: Any, amount: int, title: str, words: str
) -> None:
    inv = invoice()
    task = paid(inv)
    assert "Thank you" in Client().get(payment_link(inv, task.pk)).content.decode()
    refunded_at_the_provider(task, amount)
    page = Client().get(payment_link(inv, task.pk)).content.decode()
    assert f'<h1 id="payment-title">{title}</h1>' in page
    assert words in page
    assert "Thank you" not in page and 'method="post"' not in page
    # Paid once, and the journal's charge still stands: nothing to pay again here.
    refused = Client().post(payment_link(inv, task.pk), ANOTHER_CARD)
    assert refused.status_code == 409 and tasks_of(inv) == 1


def test_a_cancelled_renewal_whose_charge_was_refunded_says_cancelled_and_refunded(
    redis: Any,
) -> None:
    inv = invoice()
    task = paid(inv, refunded=True, cancelled=True)
    assert Task.objects.get(pk=task.pk).status == "cancelled"
    page = Client().get(payment_link(inv, task.pk)).content.decode()
    assert "This payment was cancelled" in page and "Nothing is owed" in page
    assert "Refunded: your payment of 49.00 USD was refunded to your card in full" in page


MONTH = "(?:January|February|March|April|May|June|July|August|September|October|November|December)"
MONTH_FIRST = re.compile(rf"{MONTH} \d{{1,2}}, \d{{4}}")
DAY_FIRST = re.compile(rf"\d{{1,2}} {MONTH} \d{{4}}")


@pytest.mark.parametrize(
    ("accept", "order"),
    [
        ("", "mdy"),
        ("en-US,en;q=0.9", "mdy"),
        ("en", "mdy"),
        ("en-GB,en;q=0.8", "dmy"),
        ("fr-FR,fr;q=0.9,en;q=0.8", "dmy"),
        ("en;q=0.5, en-GB", "dmy"),  # by weight, not by place
        ("de;q=0, en-us", "mdy"),
        ("*", "mdy"),
    ],
)
def test_the_readers_language_chooses_one_date_order(accept: str, order: str) -> None:
    assert reader_order(accept) == order


def test_a_date_is_written_one_way_in_each_order() -> None:
    at = datetime(2026, 12, 3, 14, 5, tzinfo=UTC)
    assert date_text(at, order="mdy") == "December 3, 2026, 14:05 UTC"
    assert date_text(at, order="dmy", with_time=False) == "3 December 2026"


@pytest.mark.parametrize(
    ("accept", "used", "never"),
    [("en-US,en;q=0.9", MONTH_FIRST, DAY_FIRST), ("en-GB", DAY_FIRST, MONTH_FIRST)],
)
def test_every_date_on_the_customers_page_is_in_the_readers_one_format(
    redis: Any, accept: str, used: re.Pattern[str], never: re.Pattern[str]
) -> None:
    inv = invoice()
    task = paid(inv, refunded=True, cancelled=True)  # paid, refunded, cancelled: three dates
    page = Client().get(payment_link(inv, task.pk), HTTP_ACCEPT_LANGUAGE=accept).content.decode()
    assert len(used.findall(page)) >= 4, page  # each date, and in its title
    assert never.findall(page) == []


def test_times_are_marked_for_the_customers_zone_with_utc_as_the_fallback(redis: Any) -> None:
    inv = invoice()
    task = renewal(inv)
    called_off(task)
    page = Client().get(payment_link(inv)).content.decode()
    assert '<time datetime="20' in page and 'data-local="datetime"' in page
    assert " UTC</time>" in page  # what a browser without the script shows


def test_a_cancelled_trips_message_says_what_was_let_go_and_what_was_refunded() -> None:
    refs = {
        "invoice": "TRIP-1",
        "email": "alan@example.com",
        "flight": "TP1351",
        "hotel": "Alfama",
        "check_in": "2027-03-01",
        "check_out": "2027-03-04",
    }

    def step(n: int, tool: str, **more: Any) -> StepFact:
        return StepFact(
            n=n, tool=tool, args={}, state=StepState.DONE, detail="", key=f"k{n}", **more
        )

    nothing = TaskFacts(task_id="t", kind="trip", goal="", refs=refs, steps=[])
    told = KINDS_BY_NAME["trip"].closing.args(refs, nothing)  # type: ignore[union-attr]
    assert told is not None and told["purpose"] == "cancellation"
    assert "nothing was held for you. Nothing is owed. No money has been taken." in told["body"]
    charge = step(3, "charge_customer", offset=True)
    refunded = TaskFacts(
        task_id="t",
        kind="trip",
        goal="",
        refs=refs,
        steps=[
            step(1, "hold_flight", offset=True),
            charge,
            step(4, "refund_charge", offsets=3, evidence={"amount": 84000, "currency": "usd"}),
            step(5, "release_flight", offsets=1),
        ],
    )
    told = KINDS_BY_NAME["trip"].closing.args(refs, refunded)  # type: ignore[union-attr]
    assert told is not None
    assert "flight TP1351 and the hotel Alfama from 2027-03-01 to 2027-03-04" in told["body"]
    assert "The payment of 840.00 USD was refunded to your card in full" in told["body"]


# --- A fresh link, from an expired one -------------------------------------------------------

NEW_LINK = {"new_link": "1"}  # the expired page's button


def test_an_expired_link_has_a_fresh_one_sent_to_the_address_on_file_recorded_and_limited(
    redis: Any,
) -> None:
    inv = invoice()
    task = declined(inv)
    url = payment_link(inv, task.pk)
    with override_settings(CUSTOMER_LINK_MAX_AGE_DAYS=-1):
        expired = Client().get(url)
        assert expired.status_code == 404 and "Email me a new link" in expired.content.decode()
        for _ in range(LINK_LIMIT):
            sent = Client().post(url, NEW_LINK)
            assert sent.status_code == 200 and LINK_ANSWER in sent.content.decode()
            assert "Email me a new link" not in sent.content.decode()
        throttled = Client().post(url, NEW_LINK)
    assert throttled.status_code == 429 and int(throttled["Retry-After"]) > 3000
    assert "nothing more was sent" in throttled.content.decode()
    links = Task.objects.filter(kind="customer_link", refs__invoice=inv)
    assert links.count() == LINK_LIMIT
    assert {(t.refs["email"], started_by(t)) for t in links} == {("ada@example.com", "customer")}
    asked = Entry.objects.filter(task=task, data__action=LINK_REQUESTED)
    assert asked.count() == LINK_LIMIT and {e.actor for e in asked} == {"customer"}
    # The link tasks say nothing of the payment: still not paid, and payable.
    page = Client().get(payment_link(inv, task.pk)).content.decode()
    assert "Your payment didn't go through" in page and "Pay with another card" in page


def test_a_fresh_link_for_a_payment_we_cannot_place_is_answered_alike_and_sends_nothing(
    redis: Any,
) -> None:
    inv = invoice()
    url = f"/pay/{payment_token(inv, str(uuid.uuid4()))}/"
    with override_settings(CUSTOMER_LINK_MAX_AGE_DAYS=-1):
        answer = Client().post(url, NEW_LINK)
    assert answer.status_code == 200 and LINK_ANSWER in answer.content.decode()
    assert not Task.objects.filter(refs__invoice=inv).exists()


# --- Links that open no payment --------------------------------------------------------------


def test_a_broken_expired_or_unbound_link_gets_a_page_that_says_how_to_get_a_new_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    inv = invoice()
    task = renewal(inv)
    token = payment_token(inv, task.pk)
    cut = token[: len(token) // 2]
    with caplog.at_level(logging.WARNING, logger="commerce.customers"):
        broken = Client().get(f"/pay/{cut}/")
    page = broken.content.decode()
    assert broken.status_code == 404 and "This payment link does not work" in page
    assert "How to get a new link" in page and settings.MERCHANT_EMAIL in page
    assert inv not in page and "Not Found" not in page and "Traceback" not in page
    assert any("refused: a customer link (broken)" in r.getMessage() for r in caplog.records)
    assert token not in caplog.text  # the token is a bearer secret: never logged

    with override_settings(CUSTOMER_LINK_MAX_AGE_DAYS=-1):
        expired = Client().get(f"/pay/{token}/")
        assert Client().post(f"/pay/{token}/", ANOTHER_CARD).status_code == 404
    page = expired.content.decode()
    assert expired.status_code == 404 and "This payment link has expired" in page
    assert "most recent email" in page and inv in page  # genuine: it may say which

    other = renewal(invoice())  # a genuine signature, bound to a task of another invoice
    unbound = Client().get(payment_link(inv, other.pk))
    assert unbound.status_code == 404 and "We can't find this payment" in unbound.content.decode()
    assert Client().get(payment_link("INV-NOBODY-KNOWS")).status_code == 404
    assert tasks_of(inv) == 1


# --- The link in the customer's emails -------------------------------------------------------
#
# The harness ends each email with it (commerce/kinds.py's Append), whichever planner wrote the
# email: here the scripted playbooks, through the planner a task's runner uses; the model
# planners' tests do the same with a model (tests/agentops/planners).


def _link_in(body: str) -> str:
    found = re.search(r"https://shop\.example\.com(/pay/[^/\s]+/)", body)
    assert found, body
    return found.group(1)


def _decided(task: Task, facts: TaskFacts) -> Call:
    """What the task's runner would record: the scripted planner, through the harness."""
    decision = planner_bound(ScriptedPlanner(), rules_for(task)).decide(facts)
    assert isinstance(decision, Call) and decision.tool == "send_email", decision
    return decision


@override_settings(CUSTOMER_BASE_URL="https://shop.example.com")
@pytest.mark.parametrize("paid", [True, False])
def test_the_receipt_and_payment_failed_emails_carry_the_page_bound_to_their_task(
    paid: bool,
) -> None:
    inv = invoice()
    task = renewal(inv)
    charge = StepFact(
        n=1,
        tool="charge_customer",
        args={},
        state=StepState.DONE if paid else StepState.NOT_DONE,
        detail="" if paid else "the provider refused it (HTTP 402 insufficient_funds): no",
        key=f"ao:{task.pk}:1",
    )
    facts = TaskFacts(task_id=str(task.pk), kind="renewal", goal="", refs=task.refs, steps=[charge])
    # The playbook writes the message; the link is not its to write.
    assert "/pay/" not in playbooks.renewal(facts).args["body"]  # type: ignore[union-attr]
    body = _decided(task, facts).args["body"]
    assert ("\n\nYour receipt: " if paid else "\n\nPay with another card: ") in body
    if not paid:
        assert "does not have enough funds" in body and "HTTP 402" not in body
    link = link_of(_link_in(body).split("/")[2])
    assert link.problem is None and link.invoice == inv and link.task_id == str(task.pk)


@override_settings(CUSTOMER_BASE_URL="https://shop.example.com")
def test_the_itinerary_email_carries_the_page_bound_to_its_trip() -> None:
    refs = {
        "invoice": invoice(),
        "amount": 84000,
        "email": "alan@example.com",
        "flight": "TP1351",
        "traveller": "Alan Turing",
        "hotel": "Alfama",
        "check_in": "2027-03-01",
        "check_out": "2027-03-04",
    }
    task = task_start(kind="trip", goal="trip", refs=refs)
    done = [
        StepFact(n=i, tool=tool, args={}, state=StepState.DONE, detail="", key=f"k{i}")
        for i, tool in enumerate(("hold_flight", "book_hotel", "charge_customer"), start=1)
    ]
    plan = [{"tool": t} for t in ("hold_flight", "book_hotel", "charge_customer", "send_email")]
    facts = TaskFacts(task_id=str(task.pk), kind="trip", goal="", refs=refs, steps=done, plan=plan)
    email = _decided(task, facts)
    assert email.args["purpose"] == "itinerary"
    assert "\n\nYour payment and trip: https://shop.example.com/pay/" in email.args["body"]
    link = link_of(_link_in(email.args["body"]).split("/")[2])
    assert (link.problem, link.invoice, link.task_id) == (None, refs["invoice"], str(task.pk))


@override_settings(CUSTOMER_BASE_URL="https://shop.example.com")
def test_an_email_is_given_the_genuine_link_once_whatever_its_writer_put_in_it() -> None:
    inv = invoice()
    task = renewal(inv)
    rules = rules_for(task)
    facts = TaskFacts(task_id=str(task.pk), kind="renewal", goal="", refs=task.refs, steps=[])
    email = {
        "to": "ada@example.com",
        "subject": f"Receipt for {inv}",
        "body": "Paid, thank you.",
        "reference": inv,
        "purpose": "receipt",
    }

    def links(body: str) -> list[str]:
        return re.findall(r"/pay/[^/\s]+/", body)

    once = rules.filled(tool="send_email", args=email, facts=facts)
    assert links(once["body"]) and len(links(once["body"])) == 1
    assert {k: v for k, v in once.items() if k != "body"} == {
        k: v for k, v in email.items() if k != "body"
    }
    # Decided again with the body it was shown (its genuine link in it): not given a second.
    assert rules.filled(tool="send_email", args=once, facts=facts) == once
    # A link the writer made up, or another task's, is not the page: the genuine one is added.
    other = renewal(invoice())
    forged = {
        **email,
        "body": "Pay here: https://shop.example.com/pay/made-up/ or "
        f"https://shop.example.com{payment_link(inv, other.pk)}",
    }
    added = rules.filled(tool="send_email", args=forged, facts=facts)["body"]
    assert len(links(added)) == 3
    assert link_of(_link_in(added.split("\n\n")[-1]).split("/")[2]).task_id == str(task.pk)
    # A call of a tool the kind writes nothing into is left as the planner wrote it.
    charge = {"invoice": inv, "amount": 4900, "currency": "usd", "payment_method": "pm_card_visa"}
    assert rules.filled(tool="charge_customer", args=charge, facts=facts) == charge
    # So is an email of a kind that writes no link into its emails (reminders).
    reminders = task_start(
        kind="reminders",
        goal="remind",
        refs={"invoices": [{"invoice": inv, "email": "ada@example.com"}]},
    )
    reminder = {**email, "purpose": "reminder", "reminder": 1}
    assert rules_for(reminders).filled(tool="send_email", args=reminder, facts=facts) == reminder
