"""One object, one name: look-alike spellings are the same object, long names are never cut
(issue 15, docs/design.md §6).

Business level: real trips (the saga, its kind's rules) against the bookings sandbox, and
its ledger as the judge. Before, a second trip for ``Ada  Lovelace`` (two spaces), with a
no-break space, a zero-width space or in full-width letters got a second flight hold and a
second room; and two stays at one long-named hotel on different dates collided, because
names were cut at 255 characters.
"""

from __future__ import annotations

import string
from typing import Any

import pytest

from agentops.effects import task_start
from agentops.kinds import kind_get, task_problems
from commerce.tools.email import SendEmail
from journal.keys import OBJECT_NAME_MAX, UnsafeName, object_key, object_label, object_name
from journal.models import Step
from tests.agentops.test_business_effects import run, trip_refs, world  # noqa: F401
from tests.journal.support import invoice
from tests.sandbox.fixtures import SandboxHandle

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")


def letters(inv: str) -> str:
    """A name part made of letters only, unique to this test."""
    return "".join(string.ascii_lowercase[int(c, 16) % 26] for c in inv[4:]).capitalize()


def holds_for(bookings: SandboxHandle, passenger: str) -> list[dict[str, Any]]:
    return [
        e
        for e in bookings.client.ledger(operation="flight_holds.create")
        if object_name(e["params"]["passenger"]).casefold() == passenger.casefold()
    ]


def rooms_at(bookings: SandboxHandle, hotel: str) -> list[dict[str, Any]]:
    return [
        e
        for e in bookings.client.ledger(operation="hotel_bookings.create")
        if e["params"]["hotel"] == hotel
    ]


@pytest.mark.usefixtures("committed", "world")
def test_look_alike_travellers_are_one_traveller(bookings_sandbox: SandboxHandle) -> None:
    family = letters(invoice())
    name = f"Ada Lovelace{family}"
    first = task_start(kind="trip", goal="a trip", refs=trip_refs(invoice(), traveller=name))
    assert run(first).stopped == "finished"

    look_alikes = [
        f"Ada  Lovelace{family}",  # two spaces
        f"Ada\u00a0Lovelace{family}",  # a no-break space
        f"Ada\u200bLovelace{family}",  # a zero-width space
        f"\uff21\uff44\uff41 Lovelace{family}",  # full-width letters
        f" ada lovelace{family.upper()} ",  # case and stray spaces
    ]
    for spelling in look_alikes:
        again = task_start(
            kind="trip", goal="the same trip", refs=trip_refs(invoice(), traveller=spelling)
        )
        assert run(again).stopped == "compensated", spelling
        hold = Step.objects.get(task=again, tool="hold_flight")
        assert (hold.state, hold.refusal) == ("not_done", "already_done"), spelling
        assert hold.detail.startswith("already done: hold_flight for TP1351:"), hold.detail
        assert not Step.objects.filter(task=again, tool="book_hotel").exists()
    assert len(holds_for(bookings_sandbox, name)) == 1
    assert len(rooms_at(bookings_sandbox, "Alfama")) >= 1
    booked = [
        r
        for r in rooms_at(bookings_sandbox, "Alfama")
        if object_name(r["params"]["guest"]).casefold() == name.casefold()
    ]
    assert len(booked) == 1


@pytest.mark.usefixtures("committed", "world")
def test_two_stays_at_a_long_named_hotel_on_different_dates_are_both_booked(
    bookings_sandbox: SandboxHandle,
) -> None:
    tag = letters(invoice())
    hotel = ("Hotel " + tag + " " + "Grand Palace of the Seven Hills " * 7)[:200].strip()
    guest = ("Guest " + tag + " " + "Maria Antonia Walpurgis Symphorosa " * 6)[:200].strip()
    assert len(f"hotel:{hotel}:{guest}:2027-03-01") > OBJECT_NAME_MAX
    stays = [
        trip_refs(invoice(), hotel=hotel, traveller=guest, flight="TP1351"),
        trip_refs(
            invoice(),
            hotel=hotel,
            traveller=guest,
            flight="TP1352",
            check_in="2027-04-01",
            check_out="2027-04-04",
        ),
    ]
    for refs in stays:
        task = task_start(kind="trip", goal="a long-named stay", refs=refs)
        assert run(task).stopped == "finished"
        room = Step.objects.get(task=task, tool="book_hotel")
        assert room.state == "done"
        assert room.guard_key is not None and len(room.guard_key) <= OBJECT_NAME_MAX
        assert (room.guard or "").startswith(f"hotel:{hotel[:40]}")  # readable for people
    assert len(rooms_at(bookings_sandbox, hotel)) == 2
    # And the same long stay twice is still one stay.
    again = task_start(
        kind="trip",
        goal="the first stay again",
        refs={**stays[0], "invoice": invoice(), "flight": "TP9"},
    )
    assert run(again).stopped == "compensated"
    assert Step.objects.get(task=again, tool="book_hotel").refusal == "already_done"
    assert len(rooms_at(bookings_sandbox, hotel)) == 2


def test_long_names_differing_at_their_end_have_different_keys() -> None:
    long = "x" * 300
    assert object_key(long + "a") != object_key(long + "b")
    assert object_key(long + "a") == object_key(long.upper() + "A")
    assert all(len(object_key(n)) == OBJECT_NAME_MAX for n in (long + "a", long + "b"))
    assert object_label(long + "a").endswith("…") and len(object_label(long + "a")) == 255


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("Ada\u2028Lovelace", "control character"),  # the schema says it first
        ("Ada\u2029Lovelace", "control character"),
        ("Ada\x85Lovelace", "control character"),
        ("Ada\ue000Lovelace", "private-use"),
        ("Ada\U000e0041Lovelace", None),  # a tag character: invisible, removed
        ("\u2060\u200b", "nothing visible"),  # would name nothing once normalised
    ],
)
def test_names_that_cannot_be_normalised_safely_are_refused_at_the_door(
    text: str, what: str | None
) -> None:
    problems = task_problems(
        kind=kind_get("trip"), goal="a trip", refs=trip_refs("T-1", traveller=text)
    )
    if what is None:
        assert problems == []
        assert object_name(text) == "AdaLovelace"
    else:
        assert problems and what in " ".join(problems), problems
        with pytest.raises(UnsafeName):
            object_name(text)


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85", "\x9b", "\r", "\x1b"])
def test_header_text_refuses_every_line_separator_and_control(separator: str) -> None:
    args = {
        "to": "ada@example.com",
        "subject": f"Receipt{separator}Bcc: everyone@example.com",
        "body": "Thank you.",
        "reference": "INV-1",
        "purpose": "receipt",
    }
    problems = SendEmail().validate(args)
    assert problems == ["subject: must not contain control characters (line breaks, tabs, ...)"]
