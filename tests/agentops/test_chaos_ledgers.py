"""The chaos run (issues 12, 16): what the providers' ledgers alone tell (business
duplicates and their causes), and each summary read back and set against them, whichever
harness told it.
"""

from __future__ import annotations

from typing import Any

import pytest

from devtools.chaos.ledgers import Ledgers, business_duplicates, by_cause
from devtools.chaos.truth import (
    Claim,
    Told,
    customer_of,
    customers_told,
    summaries_untrue,
    summary_claims,
)
from journal.outcomes import StepState
from journal.protocols import Refusal, StepFact
from journal.summary import task_summary
from tests.agentops.chaos_support import ledger_row

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")


def test_business_duplicates_are_told_from_the_ledgers_alone_with_their_cause() -> None:
    charge = {"metadata": {"invoice": "INV-1"}}
    ledgers = Ledgers(
        entries={
            "payments": [
                ledger_row(
                    "payment_intents.create", 1, "t1:a", "pi_1", params=charge, status="succeeded"
                ),
                # Refunded, then charged again: allowed (a full refund frees the invoice).
                ledger_row("refunds.create", 3, "t1:a:undo", "re_1", payment_intent="pi_1"),
                ledger_row(
                    "payment_intents.create", 4, "t1:c", "pi_2", params=charge, status="succeeded"
                ),
                # A declined card is a request, not an effect.
                ledger_row(
                    "payment_intents.create", 5, "t2:d", "pi_3", params=charge, status="failed"
                ),
                # The same invoice, written otherwise: one object in the guards' normal form.
                ledger_row(
                    "payment_intents.create",
                    6,
                    "t2:e",
                    "pi_4",
                    params={"metadata": {"invoice": " inv-1"}},
                    status="succeeded",
                ),
            ],
            "mail": [
                ledger_row("messages.send", t, f"{task}:m", f"msg_{t}", params={"headers": h})
                for t, task, h in (
                    (
                        1,
                        "t3",
                        {"X-Agentops-Reference": "INV-2", "X-Agentops-Purpose": "reminder 1"},
                    ),
                    (
                        2,
                        "t3",
                        {"X-Agentops-Reference": "inv-2 ", "X-Agentops-Purpose": "reminder 1"},
                    ),
                    (
                        3,
                        "t3",
                        {"X-Agentops-Reference": "INV-2", "X-Agentops-Purpose": "reminder 2"},
                    ),
                    (4, "t3", {"X-Agentops-Reference": "INV-2", "X-Agentops-Purpose": "notice"}),
                    (5, "t4", {"X-Agentops-Reference": "INV-2", "X-Agentops-Purpose": "notice"}),
                )
            ],
        },
        fault_logs={},
    )
    owners = {"t1": 1, "t2": 2, "t3": 3, "t4": 4}
    found = business_duplicates(
        ledgers,
        owner=lambda key: owners.get(key.split(":")[0]),
        asked_twice=lambda a, b: {a, b} == {1, 2},  # the plan asked tasks 1 and 2 alike
    )
    assert [str(d) for d in found] == [
        "a second email:reminder:1:inv-2  (msg_2; first msg_1): from faults",
        "a second charge: inv-1 (pi_4; first pi_2): asked twice",
    ]
    assert by_cause(found) == {"from_faults": 1, "asked_twice": 1, "wrong_object": 0}
    unrelated = business_duplicates(
        ledgers, owner=lambda key: owners.get(key.split(":")[0]), asked_twice=lambda a, b: False
    )
    assert by_cause(unrelated)["wrong_object"] == 1


def _fact(n: int, tool: str, state: StepState, **extra: Any) -> StepFact:
    return StepFact(n=n, tool=tool, args={}, state=state, detail="", key=f"ao:t:{n}", **extra)


def test_a_summary_reads_back_into_what_it_claims() -> None:
    done = StepState.DONE
    steps = [
        _fact(1, "hold_flight", done, guard="flight:TP1351:Ada L", evidence={"id": "hold_1"}),
        _fact(
            2,
            "book_hotel",
            done,
            guard="hotel:Full House:Ada L:2027-03-01",
            evidence={"id": "bk_1"},
            offset=True,
        ),
        _fact(3, "cancel_hotel", done, evidence={"id": "bk_1"}, offsets=2),
        _fact(4, "charge_customer", done, guard="charge:T-1", evidence={"charge": "ch_9"}),
        StepFact(
            5,
            "send_email",
            {},
            StepState.NOT_DONE,
            "the mail provider refused it (400); it did not happen",
            "ao:t:5",
            guard="email:itinerary:T-1",
        ),
        StepFact(6, "send_email", {}, StepState.UNKNOWN, "timed out", "ao:t:6", guard="x:y"),
        StepFact(
            7,
            "charge_customer",
            {},
            StepState.NOT_DONE,
            "already done: charge_customer for T-1 (charge ch_9); do not do it again",
            "ao:t:7",
            guard="charge:T-1",
            refusal=Refusal.ALREADY_DONE,
        ),
    ]
    claims = summary_claims("Compensated. " + task_summary(steps))
    assert claims == [
        Claim("done", "hold_flight", "TP1351:Ada L", "hold_1", text=claims[0].text),
        Claim("done", "charge_customer", "T-1", "ch_9", text=claims[1].text),
        Claim(
            "undone",
            "book_hotel",
            "Full House:Ada L:2027-03-01",
            "bk_1",
            "cancel_hotel",
            "bk_1",
            text=claims[2].text,
        ),
        Claim("not done", "send_email", "itinerary:T-1", text=claims[3].text),
        Claim("unknown", "send_email", "y", reference="ao:t:6", text=claims[4].text),
        Claim("refused", "charge_customer", "T-1", text=claims[5].text),
    ]
    assert claims[1].guard == "charge:T-1" and claims[3].guard == "email:itinerary:T-1"
    assert summary_claims(task_summary([])) == []


def test_a_summary_is_set_against_the_ledgers_whichever_harness_told_it() -> None:
    pay = {"metadata": {"invoice": "INV-7"}}
    ledgers = Ledgers(
        entries={
            "payments": [
                ledger_row(
                    "payment_intents.create", 1, "ao:a:1", "pi_1", params=pay, status="succeeded"
                ),
                ledger_row(
                    "payment_intents.create", 2, "ao:b:1", "pi_2", params=pay, status="succeeded"
                ),
                ledger_row(
                    "payment_intents.create", 3, "ao:b:2", "pi_3", params=pay, status="succeeded"
                ),
                ledger_row(
                    "payment_intents.create",
                    4,
                    "ao:c:1",
                    "pi_4",
                    params={"metadata": {"invoice": "INV-8"}},  # a neighbouring invoice
                    status="succeeded",
                ),
            ],
        },
        fault_logs={},
        charges={"ch_1": "pi_1", "ch_2": "pi_2", "ch_3": "pi_3", "ch_4": "pi_4"},
    )
    said = {
        "a": "1 done. Done: charge_customer for INV-7 (charge ch_1).",  # true
        "b": "1 done. Done: charge_customer for INV-7 (charge ch_2).",  # a second, unsaid
        "c": "1 done. Done: charge_customer for INV-7 (charge ch_4).",  # another invoice
        "d": "1 not done. Not done: charge_customer for INV-7 — failed after 3 errors.",
        "e": "1 done. Done: charge_customer for INV-7 (charge ch_404).",  # no such effect
    }
    prefixes = {task: f"ao:{task}:" for task in said}
    untrue = summaries_untrue(said, key_prefix=prefixes, ledgers=ledgers)
    assert [line.split(":")[0] for line in untrue] == ["b", "c", "e"]
    assert "does not mention charge_customer pi_3" in untrue[0]
    assert "acted on 'charge:INV-8'" in untrue[1]
    # The same words, said by a task whose keys made the charge: "not done" is untrue.
    [denied] = summaries_untrue({"d": said["d"]}, key_prefix={"d": "ao:a:"}, ledgers=ledgers)
    assert "the provider performed it (pi_1 under ao:a:1)" in denied


def _closing(at: float, key: str, purpose: str, reference: str, to: str) -> dict[str, Any]:
    headers = {"X-Agentops-Reference": reference, "X-Agentops-Purpose": purpose}
    params = {"to": to, "headers": headers}
    return ledger_row("messages.send", at, key, f"msg_{at:g}", params=params)


def test_each_customer_owed_a_closing_message_is_told_once_by_the_mail_ledger() -> None:
    """Issue 38: a rejected trip's customer receives one message, by the mail provider's
    own ledger: one is right, none is not told, two is told twice, and one whose task was not
    compensated (or that nobody owed) is told wrongly."""
    one, none, two = (customer_of(f"t{n}@example.com", f"TRIP-{n}") for n in (1, 2, 3))
    mail = [
        _closing(1, "ao:t1:5", "cancellation", "TRIP-1", "t1@example.com"),
        # Another harness's message, any reference's: not a closing one.
        _closing(2, "ao:t2:4", "itinerary", "TRIP-2", "t2@example.com"),
        _closing(3, "ao:t3:5", "cancellation", "TRIP-3", "t3@example.com"),
        # The same customer, written otherwise, again: told twice.
        _closing(4, "ao:t3:5", "cancellation", " trip-3", "T3@Example.com "),
    ]
    compensated = {"ao:t1:": True, "ao:t2:": True, "ao:t3:": True}

    def told(rows: list[dict[str, Any]], owed: set[tuple[str, str]]) -> Told:
        ledgers = Ledgers(entries={"mail": rows}, fault_logs={})
        return customers_told(owed=owed, compensated=compensated, ledgers=ledgers)

    assert told(mail[:1], {one}) == Told(not_told=[], twice=[], wrongly=[], owed=1)
    found = told(mail, {one, none, two})
    assert found.not_told == ["t2@example.com about trip-2: no closing message"]
    assert found.twice == [
        "t3@example.com about trip-3: 2 closing messages (msg_3 under ao:t3:5, msg_4 under ao:t3:5)"
    ]
    assert found.wrongly == []
    # A refunded renewal's message counts as its closing one too.
    refund = _closing(5, "ao:t4:3", "refund", "INV-4", "t4@example.com")
    assert told([refund], {customer_of("t4@example.com", "INV-4")}).not_told == []
    # A closing message from a task that finished, or to nobody owed one: told wrongly.
    compensated["ao:t4:"] = False
    wrong = told([refund], set())
    assert wrong.wrongly == [
        "msg_5 to t4@example.com about inv-4 (under ao:t4:3): its task was not compensated"
    ]
    compensated["ao:t4:"] = True
    assert told([refund], set()).wrongly == [
        "msg_5 to t4@example.com about inv-4 (under ao:t4:3): nothing of theirs was undone"
    ]
    # A trip asked for twice: one finished, one undone; its customer is not told it was
    # cancelled, since it stands.
    ledgers = Ledgers(entries={"mail": mail[:1]}, fault_logs={})
    assert customers_told(
        owed={one}, compensated=compensated, ledgers=ledgers, standing={one}
    ).wrongly == [
        "msg_1 to t1@example.com about trip-1 (under ao:t1:5): a saga of theirs finished: "
        "what it says was undone stands"
    ]
