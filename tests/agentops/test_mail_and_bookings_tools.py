"""send_email and the bookings tools over HTTP against their sandboxes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from agentops.kinds import tool_registry
from commerce.tools.email import message_id
from journal.models import Entry, EntryKind, Step, Task
from journal.policy import Policy
from journal.protocols import Call
from journal.record import task_create
from journal.run import task_advance
from tests.journal.support import ScriptedPlanner, invoice
from tests.sandbox.fixtures import SandboxHandle

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")

AT_ONCE = Policy(lookup_schedule=(0.0, 0.0, 0.0))


@pytest.fixture(autouse=True)
def providers(on_sandbox: dict[str, Any]) -> Iterator[None]:
    with override_settings(**on_sandbox, TOOL_TIMEOUT_SECONDS=0.3):
        yield


def run(*decisions: Call) -> tuple[Task, list[Step]]:
    task = task_create(kind="trip", goal="book a trip")
    task_advance(
        task_id=task.pk,
        planner=ScriptedPlanner(list(decisions)),
        tools=tool_registry(),
        policy=AT_ONCE,
    )
    task.refresh_from_db()
    return task, list(Step.objects.filter(task=task, kind="call").order_by("n"))


def receipt(inv: str) -> Call:
    return Call(
        "send_email",
        {
            "to": "ada@example.com",
            "subject": f"Receipt for {inv}",
            "body": "Thank you for your payment of 49.00.",
            "reference": inv,
            "purpose": "receipt",
        },
    )


def test_an_email_is_sent_once_with_the_key_in_its_message_id(mail_sandbox: SandboxHandle) -> None:
    _, [step] = run(receipt(invoice()))
    assert step.state == "done"
    [sent] = mail_sandbox.client.ledger(key=step.key)
    assert sent["reference"] == message_id(step.key)
    assert step.outcome["evidence"]["message_id"] == message_id(step.key)
    assert sent["params"]["headers"] == {
        "X-Agentops-Reference": step.args["reference"],
        "X-Agentops-Purpose": "receipt",
    }


def test_a_reminder_says_which_reminder_of_which_invoice_it_is(
    mail_sandbox: SandboxHandle,
) -> None:
    inv = invoice()
    reminder = Call(
        "send_email",
        {
            "to": "ada@example.com",
            "subject": "A gentle nudge",
            "body": "Please pay.",
            "reference": inv,
            "purpose": "reminder",
            "reminder": 2,
        },
    )
    _, [step] = run(reminder)
    [sent] = mail_sandbox.client.ledger(key=step.key)
    assert sent["params"]["headers"] == {
        "X-Agentops-Reference": inv,
        "X-Agentops-Purpose": "reminder 2",
    }


@pytest.mark.parametrize(
    ("fault", "options"),
    [("latency_after_effect", {"delay": 0.6}), ("drop_after_effect", {}), ("error_500_after", {})],
)
def test_an_email_whose_reply_was_lost_is_found_by_message_id_not_sent_twice(
    mail_sandbox: SandboxHandle, fault: str, options: dict[str, Any]
) -> None:
    mail_sandbox.client.fault("messages.send", fault, **options)
    _, [step] = run(receipt(invoice()))
    assert step.state == "done"
    assert len(mail_sandbox.client.ledger(key=step.key)) == 1
    lookup = Entry.objects.get(step=step, kind=EntryKind.LOOKUP)
    assert lookup.data["found"] is True


def test_an_invalid_address_is_not_done_and_nothing_is_sent(mail_sandbox: SandboxHandle) -> None:
    before = len(mail_sandbox.client.ledger())
    bad = Call("send_email", {"to": "not-an-address", "subject": "x", "body": "y"})
    _, [step] = run(bad)
    assert step.state == "not_done" and "to:" in step.detail
    assert len(mail_sandbox.client.ledger()) == before


def test_a_flight_is_held_and_released_each_once(bookings_sandbox: SandboxHandle) -> None:
    hold = Call("hold_flight", {"flight": "BA117", "passenger": f"Ada {invoice()}"})
    _, [held] = run(hold)
    assert held.state == "done" and held.outcome["evidence"]["status"] == "held"
    hold_id = held.outcome["evidence"]["id"]
    bookings_sandbox.client.fault("flight_holds.release", "drop_after_effect")
    _, [released] = run(Call("release_flight", {"hold": hold_id}))
    assert released.state == "done"
    assert len(bookings_sandbox.client.ledger(key=held.key)) == 1
    assert len(bookings_sandbox.client.ledger(key=released.key)) == 1


def test_a_hotel_booking_whose_reply_was_lost_is_found_by_reference(
    bookings_sandbox: SandboxHandle,
) -> None:
    bookings_sandbox.client.fault("hotel_bookings.create", "drop_after_effect")
    book = Call(
        "book_hotel",
        {
            "hotel": "Grand",
            "guest": f"Ada {invoice()}",
            "check_in": "2027-01-10",
            "check_out": "2027-01-12",
        },
    )
    _, [booked] = run(book)
    assert booked.state == "done"
    [effect] = bookings_sandbox.client.ledger(reference=booked.key)
    assert booked.outcome["evidence"]["id"] == effect["object_id"]
    _, [cancelled] = run(Call("cancel_hotel", {"booking": effect["object_id"]}))
    assert cancelled.state == "done" and cancelled.outcome["evidence"]["status"] == "cancelled"
