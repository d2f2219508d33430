"""Sagas on real workers against the sandbox providers (issue 9).

Every test ends by checking the providers' ledgers against the journal: each effect the
saga made either stands, or is offset by exactly one compensation — keyed from the step it
undoes — and nothing else happened.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

import pytest
import requests
from django.test import override_settings

from agentops.effects import task_start
from agentops.kinds import TaskRefused
from agentops.operators.services import task_approve, task_compensate, task_reject, task_resume
from agentops.runner import task_run
from commerce.customers.selectors import payment_of
from journal.keys import undo_key
from journal.models import Approval, Entry, EntryKind, Step, Task
from tests.agentops.planners.fakes import openai_text, openai_tool_call, serve
from tests.agentops.test_runner import finished
from tests.agentops.workers import Fleet, quiet_world
from tests.databases import flag
from tests.sandbox.fixtures import SandboxHandle, wait_for

pytestmark = pytest.mark.usefixtures("committed")

LEDGERS = {
    "hold_flight": ("bookings", "flight_holds.create"),
    "release_flight": ("bookings", "flight_holds.release"),
    "book_hotel": ("bookings", "hotel_bookings.create"),
    "cancel_hotel": ("bookings", "hotel_bookings.cancel"),
    "charge_customer": ("payments", "payment_intents.create"),
    "refund_charge": ("payments", "refunds.create"),
    "send_email": ("mail", "messages.send"),
}


def trip_refs(**change: Any) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    return {
        "invoice": f"TRIP-{tag}",
        "amount": 84000,
        "email": "alan@example.com",
        "flight": "TP1351",
        "traveller": f"Alan {tag}",
        "hotel": f"Alfama {tag}",
        "check_in": "2027-03-01",
        "check_out": "2027-03-04",
        **change,
    }


def ended(task: Task, timeout: float = 60) -> Task:
    wait_for(
        lambda: (
            Task.objects.get(pk=task.pk).status
            in ("finished", "compensated", "needs_human", "awaiting_approval")
        ),
        timeout=timeout,
        interval=0.05,
        what=f"task {task.pk} to stop",
    )
    return Task.objects.get(pk=task.pk)


def steps(task: Task) -> list[tuple[str, str]]:
    return [(s.tool, s.state) for s in Step.objects.filter(task=task, kind="call").order_by("n")]


def charges_for(world: dict[str, SandboxHandle], invoice: str) -> list[dict[str, Any]]:
    return [
        e
        for e in world["payments"].client.ledger(operation="payment_intents.create")
        if (e["params"].get("metadata") or {}).get("invoice") == invoice
    ]


def balanced(task: Task, world: dict[str, SandboxHandle]) -> dict[str, int]:
    """Assert each effect stands or is offset by exactly one compensation; return the
    provider operations the task caused, counted."""
    counted: dict[str, int] = {}
    for step in Step.objects.filter(task=task, kind="call").order_by("n"):
        provider, operation = LEDGERS[step.tool]
        effects = world[provider].client.ledger(key=step.key, operation=operation)
        if step.state == "not_done":
            assert effects == [], f"{step.key} not done but the provider acted"
            continue
        if step.tool == "release_flight" and step.evidence.get("status") == "expired":
            # Releasing a hold the airline already let go changes nothing there.
            assert effects == [], f"{step.key} released an expired hold"
            continue
        assert len(effects) == 1, f"{step.key}: {len(effects)} effects"
        counted[operation] = counted.get(operation, 0) + 1
        undos = list(Step.objects.filter(offsets=step, state="done"))
        assert len(undos) <= 1
        if step.offset_by_id is not None:
            [undo] = undos
            assert undo.pk == step.offset_by_id and undo.key.startswith(undo_key(step.key))
    return counted


@pytest.fixture
def world(
    payments_sandbox: SandboxHandle,
    mail_sandbox: SandboxHandle,
    bookings_sandbox: SandboxHandle,
    clean_faults: None,
) -> dict[str, SandboxHandle]:
    return {"payments": payments_sandbox, "mail": mail_sandbox, "bookings": bookings_sandbox}


def test_a_trip_completes_as_a_saga_each_step_declaring_its_undo(
    fleet: Fleet, world: dict[str, SandboxHandle]
) -> None:
    fleet.worker()
    task = ended(task_start(kind="trip", goal="Lisbon", refs=trip_refs()))
    assert task.status == "finished"
    assert [(s.tool, s.undo_tool) for s in Step.objects.filter(task=task, kind="call")] == [
        ("hold_flight", "release_flight"),
        ("book_hotel", "cancel_hotel"),
        ("charge_customer", "refund_charge"),
        ("send_email", ""),
    ]
    assert balanced(task, world) == {
        "flight_holds.create": 1,
        "hotel_bookings.create": 1,
        "payment_intents.create": 1,
        "messages.send": 1,
    }


def test_a_refused_hotel_releases_the_flight_hold_charges_nothing_and_tells_the_traveller(
    fleet: Fleet, world: dict[str, SandboxHandle]
) -> None:
    refs = trip_refs()
    world["bookings"].client.config(full_hotels=[refs["hotel"]])
    fleet.worker()
    task = ended(task_start(kind="trip", goal="Lisbon, hotel full", refs=refs))
    assert task.status == "compensated"
    assert steps(task) == [
        ("hold_flight", "done"),
        ("book_hotel", "not_done"),
        ("release_flight", "done"),
        ("send_email", "done"),  # the harness's closing call: the trip was cancelled
    ]
    hold, hotel, release, told = Step.objects.filter(task=task, kind="call").order_by("n")
    assert "no_availability" in hotel.detail
    assert release.offsets_id == hold.pk and release.key == undo_key(hold.key)
    assert release.args == {"hold": hold.evidence["id"]}  # mapped by the harness
    assert Entry.objects.filter(task=task, kind=EntryKind.SAGA_UNWINDING).count() == 1
    summary = Step.objects.get(task=task, kind="finish").detail
    assert summary.startswith("Compensated. ")
    assert ", undone by release_flight (id fh_" in summary
    assert told.args["purpose"] == "cancellation" and told.decision == {"harness": "closing"}
    assert "No money has been taken." in told.args["body"]
    assert balanced(task, world) == {
        "flight_holds.create": 1,
        "flight_holds.release": 1,
        "messages.send": 1,
    }


def test_a_held_charge_approved_by_a_person_completes(
    fleet: Fleet, world: dict[str, SandboxHandle]
) -> None:
    fleet.worker()
    # Above 3,000.00 a person approves the charge before the card is touched.
    task = ended(task_start(kind="trip", goal="a big trip", refs=trip_refs(amount=400000)))
    assert task.status == "awaiting_approval"
    held = Approval.objects.get(task=task)
    assert held.state == "pending" and held.tool == "charge_customer"
    assert held.args["amount"] == 400000 and "of 4,000.00 USD is above 3,000.00 USD" in held.reason
    assert steps(task) == [("hold_flight", "done"), ("book_hotel", "done")]
    assert charges_for(world, task.refs["invoice"]) == []  # the card is not touched

    assert task_approve(
        task_id=task.pk, approval_id=held.pk, digest=held.digest, actor="ops@example.com"
    )
    task = ended(task)
    assert task.status == "finished"
    held.refresh_from_db()
    charge = Step.objects.get(task=task, tool="charge_customer")
    assert held.state == "used" and held.used_by_id == charge.pk
    assert held.decided_by == "ops@example.com"
    assert charge.args == held.args  # exactly what was approved, not asked again
    assert balanced(task, world)["payment_intents.create"] == 1


def test_a_held_charge_rejected_by_a_person_releases_everything_it_held(
    fleet: Fleet, world: dict[str, SandboxHandle]
) -> None:
    fleet.worker()
    plan: list[dict[str, Any]] = [
        {"tool": "hold_flight"},
        {"tool": "book_hotel"},
        {"tool": "charge_customer", "hold": True},
        {"tool": "send_email"},
    ]
    task = ended(task_start(kind="trip", goal="held by plan", refs=trip_refs(), plan=plan))
    assert task.status == "awaiting_approval"
    held = Approval.objects.get(task=task)
    assert held.reason == "the plan holds charge_customer for a person's approval"
    task_reject(task_id=task.pk, approval_id=held.pk, actor="ops@example.com", reason="too dear")
    task = ended(task)
    assert task.status == "compensated"
    # Undone newest first: the hotel, then the flight; then the traveller is told, once.
    assert steps(task) == [
        ("hold_flight", "done"),
        ("book_hotel", "done"),
        ("cancel_hotel", "done"),
        ("release_flight", "done"),
        ("send_email", "done"),
    ]
    assert Approval.objects.get(pk=held.pk).state == "rejected"
    assert balanced(task, world) == {
        "flight_holds.create": 1,
        "hotel_bookings.create": 1,
        "hotel_bookings.cancel": 1,
        "flight_holds.release": 1,
        "messages.send": 1,
    }
    [told] = cancellations(world, task.refs["invoice"])
    assert told["to"] == "alan@example.com"
    assert told["subject"] == f"Your trip {task.refs['invoice']} was cancelled"
    assert "Nothing is owed. No money has been taken." in told["body"]
    assert "/pay/" in told["body"]  # the customer's page, bound to the trip (Append)

    # Processed again — a second run of the same task, the task run by hand: nothing more.
    task_run(task_id=task.pk)
    fleet.worker()
    task_run(task_id=task.pk)
    assert Task.objects.get(pk=task.pk).status == "compensated"
    assert len(cancellations(world, task.refs["invoice"])) == 1
    assert Step.objects.filter(task=task, tool="send_email").count() == 1


def cancellations(world: dict[str, SandboxHandle], invoice: str) -> list[dict[str, Any]]:
    """The messages the mail provider accepted saying the trip was cancelled."""
    return [
        e["params"]
        for e in world["mail"].client.ledger(operation="messages.send")
        if (e["params"].get("headers") or {}).get("X-Agentops-Reference") == invoice
        and e["params"]["headers"].get("X-Agentops-Purpose") == "cancellation"
    ]


def test_a_rejected_trips_message_whose_reply_is_lost_is_looked_up_and_sent_once(
    fleet: Fleet, world: dict[str, SandboxHandle]
) -> None:
    """The mail provider takes the cancellation and its reply is lost: the step is unknown,
    looked up by its key, found, settled done; a second run sends nothing more."""
    fleet.worker()
    plan: list[dict[str, Any]] = [
        {"tool": "hold_flight"},
        {"tool": "book_hotel"},
        {"tool": "charge_customer", "hold": True},
        {"tool": "send_email"},
    ]
    task = ended(task_start(kind="trip", goal="held by plan", refs=trip_refs(), plan=plan))
    held = Approval.objects.get(task=task)
    world["mail"].client.fault("messages.send", "drop_after_effect")
    task_reject(task_id=task.pk, approval_id=held.pk, actor="ops@example.com", reason="no")
    wait_for(
        lambda: Task.objects.get(pk=task.pk).status == "compensated",
        timeout=60,
        interval=0.1,
        what="the trip to be compensated",
    )
    told = Step.objects.get(task=task, tool="send_email")
    assert told.state == "done" and told.lookups >= 1
    task_run(task_id=task.pk)
    assert len(cancellations(world, task.refs["invoice"])) == 1


def test_a_compensation_that_times_out_is_unknown_then_reconciled_done(
    fleet: Fleet, world: dict[str, SandboxHandle]
) -> None:
    refs = trip_refs()
    world["bookings"].client.config(full_hotels=[refs["hotel"]])
    # The release lands after the client gave up (0.5 s): its outcome is unknown.
    world["bookings"].client.fault("flight_holds.release", "latency_before_effect", delay=1.0)
    fleet.worker()
    task = ended(task_start(kind="trip", goal="slow release", refs=refs))
    assert task.status == "compensated"
    release = Step.objects.get(task=task, tool="release_flight")
    settled = list(
        Entry.objects.filter(step=release, kind=EntryKind.STEP_SETTLED)
        .order_by("id")
        .values_list("data__state", flat=True)
    )
    # Unknown first (and again while the late request is still in flight: 409), then found.
    assert settled[0] == "unknown" and settled[-1] == "done" and set(settled) == {"unknown", "done"}
    assert balanced(task, world)["flight_holds.release"] == 1


def test_a_saga_that_waits_past_its_key_lifetime_never_retries_with_the_dead_key(
    fleet: Fleet, world: dict[str, SandboxHandle]
) -> None:
    bookings = world["bookings"]
    bookings.client.config(key_lifetime=6)
    # The hotel booking lands but its reply is lost, and the provider cannot be asked about
    # it for a long while (every lookup answers 500).
    bookings.client.fault("hotel_bookings.create", "drop_after_effect")
    bookings.client.fault("hotel_bookings.list", "error_500_before", times=None)
    # The first lookup comes after the journal stopped trusting the key (90 % of 6 s):
    # whatever the machine's load, no round can find the key alive and send the booking
    # again. (The key is as short as the start-up check lets it be: a call of 0.5 s must fit
    # in the tenth of its life that is not trusted.)
    fleet.worker(BOOKINGS_KEY_LIFETIME_SECONDS="6", RECONCILE_SCHEDULE="6,1,1")
    task = ended(task_start(kind="trip", goal="a long wait", refs=trip_refs()), timeout=60)
    assert task.status == "needs_human" and task.attention_code == "key_dead"
    hotel = Step.objects.get(task=task, tool="book_hotel")
    assert hotel.state == "unknown" and hotel.attempts == 1  # never sent again
    assert len(bookings.client.ledger(key=hotel.key)) == 1

    # The provider answers again; a person resumes: one more lookup finds the booking.
    bookings.client.clear_faults()
    fleet.worker()
    task_resume(task_id=task.pk, actor="ops@example.com", reason="the provider is back")
    task = ended(task)
    assert task.status == "finished"
    assert Step.objects.get(pk=hotel.pk).state == "done"
    assert balanced(task, world)["hotel_bookings.create"] == 1


def test_a_flight_hold_that_expired_while_held_for_approval_is_never_charged_for(
    fleet: Fleet, world: dict[str, SandboxHandle]
) -> None:
    bookings = world["bookings"]
    bookings.client.config(hold_expiry=2)
    fleet.worker()
    task = ended(task_start(kind="trip", goal="over a weekend", refs=trip_refs(amount=400000)))
    assert task.status == "awaiting_approval"
    hold = Step.objects.get(task=task, tool="hold_flight")
    # The weekend: the airline lets the hold go on its own.
    wait_for(
        lambda: (
            requests.get(f"{bookings.url}/v1/flight_holds/{hold.evidence['id']}", timeout=5).json()[
                "status"
            ]
            == "expired"
        ),
        timeout=30,
        what="the hold to expire",
    )
    held = Approval.objects.get(task=task)
    assert task_approve(task_id=task.pk, approval_id=held.pk, digest=held.digest, actor="ops")
    task = ended(task)
    assert task.status == "needs_human" and task.attention_code == "effect_lapsed"
    assert hold.key in task.attention
    assert not Step.objects.filter(task=task, tool="charge_customer").exists()
    checked = Entry.objects.get(task=task, kind=EntryKind.EFFECT_CHECKED, step=hold)
    assert checked.data["stands"] is False

    # A person has it compensate: the hotel is cancelled; the lapsed hold needs no release,
    # and releasing it anyway changes nothing at the airline.
    task_compensate(task_id=task.pk, actor="ops", reason="the seat is gone")
    task = ended(task)
    assert task.status == "compensated"
    counted = balanced(task, world)
    assert counted.get("payment_intents.create") is None and counted["hotel_bookings.cancel"] == 1


def test_an_irreversible_step_proposed_too_early_is_refused(
    fleet: Fleet, world: dict[str, SandboxHandle]
) -> None:
    refs = trip_refs()
    itinerary = {
        "to": refs["email"],
        "subject": "Your trip",
        "body": "All booked.",
        "reference": refs["invoice"],
        "purpose": "itinerary",
    }
    script = [
        openai_tool_call("send_email", itinerary),  # the model jumps ahead
        openai_tool_call("hold_flight", {"flight": refs["flight"], "passenger": refs["traveller"]}),
        openai_tool_call(
            "book_hotel",
            {
                "hotel": refs["hotel"],
                "guest": refs["traveller"],
                "check_in": refs["check_in"],
                "check_out": refs["check_out"],
            },
        ),
        openai_tool_call(
            "charge_customer",
            {
                "invoice": refs["invoice"],
                "amount": refs["amount"],
                "currency": "usd",
                "payment_method": "pm_card_visa",
            },
        ),
        openai_tool_call("send_email", itinerary),
        openai_text("Booked."),
    ]
    with serve_model(copy.deepcopy(script)) as model:
        fleet.worker(
            PLANNER="openai",
            OPENAI_API_KEY="sk-test",
            OPENAI_BASE_URL=f"{model.url}/v1",
            PLANNER_TIMEOUT_SECONDS="5",
        )
        task = finished(task_start(kind="trip", goal="book it", refs=refs))
        told = model.bodies[1]["messages"][-1]["content"]
    assert task.status == "finished"
    early = Step.objects.get(task=task, n=1)
    assert early.refusal == "order"
    assert "send_email cannot be undone, and hold_flight, book_hotel, charge_customer" in told
    assert world["mail"].client.ledger(key=early.key) == []
    assert [t for t, state in steps(task) if state == "done"] == [
        "hold_flight",
        "book_hotel",
        "charge_customer",
        "send_email",
    ]
    balanced(task, world)


def serve_model(script: list[Any]) -> Any:
    import contextlib

    return contextlib.contextmanager(serve)(*script)


# --- Plans are validated when they are recorded ----------------------------------------------


@pytest.mark.parametrize(
    ("plan", "complaint"),
    [
        (
            [{"tool": "hold_flight"}, {"tool": "send_email"}, {"tool": "charge_customer"}],
            "charge_customer may fail, and comes after send_email, which cannot be undone",
        ),
        ([{"tool": "wire_money"}], "'wire_money' is not a step of a trip saga"),
        ([{"tool": "hold_flight"}, {"tool": "hold_flight"}], "hold_flight is planned twice"),
        ([{"tool": "hold_flight", "when": "now"}], "must be an object with a tool"),
        ([], "plan: must be a non-empty list of steps"),
    ],
)
def test_a_bad_plan_is_refused_at_the_door(plan: list[Any], complaint: str) -> None:
    before = Task.objects.count()
    with pytest.raises(TaskRefused, match=complaint):
        task_start(kind="trip", goal="trip", refs=trip_refs(), plan=plan)
    assert Task.objects.count() == before


def test_a_task_that_is_not_a_saga_takes_no_plan() -> None:
    refs = {"invoice": f"INV-{uuid.uuid4().hex[:6]}", "amount": 100, "email": "a@b.co"}
    with pytest.raises(TaskRefused, match="a renewal task is not a saga"):
        task_start(kind="renewal", goal="g", refs=refs, plan=[{"tool": "charge_customer"}])


def test_a_call_the_rules_refuse_is_refused_not_held_for_a_person(
    fleet: Fleet, world: dict[str, SandboxHandle]
) -> None:
    """Above the approval threshold, a charge for another invoice (an injected goal) is not
    put before a person: it is refused, like any call that does not belong to the task. Only
    the task's own charge waits for approval."""
    refs = trip_refs(amount=420000)
    charge = {
        "invoice": refs["invoice"],
        "amount": refs["amount"],
        "currency": "usd",
        "payment_method": "pm_card_visa",
    }
    script = [
        openai_tool_call("hold_flight", {"flight": refs["flight"], "passenger": refs["traveller"]}),
        openai_tool_call(
            "book_hotel",
            {
                "hotel": refs["hotel"],
                "guest": refs["traveller"],
                "check_in": refs["check_in"],
                "check_out": refs["check_out"],
            },
        ),
        openai_tool_call("charge_customer", {**charge, "invoice": "INV-ATTACKER"}),
        openai_tool_call("charge_customer", charge),
    ]
    with serve_model(copy.deepcopy(script)) as model:
        fleet.worker(
            PLANNER="openai",
            OPENAI_API_KEY="sk-test",
            OPENAI_BASE_URL=f"{model.url}/v1",
            PLANNER_TIMEOUT_SECONDS="5",
        )
        task = ended(task_start(kind="trip", goal="book it", refs=refs))
    assert task.status == "awaiting_approval"
    refused = Step.objects.get(task=task, n=3)
    assert refused.tool == "charge_customer" and refused.state == "not_done" and refused.refusal
    [held] = Approval.objects.filter(task=task)
    assert held.args["invoice"] == refs["invoice"] and held.state == "pending"
    assert charges_for(world, "INV-ATTACKER") == [] and charges_for(world, refs["invoice"]) == []


def test_a_renewal_a_person_compensates_is_refunded_and_its_customer_told_once(
    on_sandbox: dict[str, Any], world: dict[str, SandboxHandle]
) -> None:
    """Charged, its receipt's reply lost, and handed to a person, who has it compensate: the
    charge is refunded through its keyed undo, then the customer is told of the refund —
    one message, however often the task is run again."""
    redis = quiet_world()
    inv = f"INV-{uuid.uuid4().hex[:8]}"
    refs = {"invoice": inv, "amount": 4900, "email": "ada@example.com"}
    with override_settings(**on_sandbox, TOOL_TIMEOUT_SECONDS=1.0, PLANNER="scripted"):
        world["mail"].client.fault("messages.send", "drop_after_effect")
        task = task_start(kind="renewal", goal="renew", refs=refs)
        task_run(task_id=task.pk)
        assert Task.objects.get(pk=task.pk).status == "waiting"  # the receipt is unknown
        flag(task.pk, "parked", "the customer asked for their money back")
        task_compensate(task_id=task.pk, actor="ops", reason="refund the customer")
        wait_for(
            lambda: (
                task_run(task_id=task.pk) is not None
                and Task.objects.get(pk=task.pk).status == "compensated"
            ),
            timeout=30,
            interval=0.2,
            what="the renewal to be compensated",
        )
        for _ in range(2):  # processed again: nothing more
            task_run(task_id=task.pk)
    redis.flushdb()
    task = Task.objects.get(pk=task.pk)
    assert steps(task) == [
        ("charge_customer", "done"),
        ("send_email", "done"),
        ("refund_charge", "done"),
        ("send_email", "done"),
    ]
    sent = [
        e["params"]
        for e in world["mail"].client.ledger(operation="messages.send")
        if (e["params"].get("headers") or {}).get("X-Agentops-Reference") == inv
    ]
    purposes = [e["headers"]["X-Agentops-Purpose"] for e in sent]
    assert purposes == ["receipt", "refund"]
    assert "We refunded your payment of 49.00 USD for " in sent[1]["body"]
    assert "/pay/" in sent[1]["body"]
    assert balanced(task, world)["refunds.create"] == 1
    told = payment_of(invoice=inv)
    assert told is not None and told.refunded and told.refunded_amount == 4900


def test_a_trip_asked_for_twice_does_not_tell_its_traveller_the_booked_trip_was_cancelled(
    fleet: Fleet, world: dict[str, SandboxHandle]
) -> None:
    """Issue 38 (found by the chaos run, seed 1): the same trip asked for a second time is
    refused at its first step, since the first task holds that flight for that traveller; it
    undoes nothing of its own and must not send the traveller "your trip was cancelled"
    while the first task's trip stands."""
    refs = trip_refs()
    fleet.worker()
    first = ended(task_start(kind="trip", goal="Lisbon", refs=refs))
    assert first.status == "finished"
    again = ended(task_start(kind="trip", goal="Lisbon", refs=copy.deepcopy(refs)))
    assert cancellations(world, refs["invoice"]) == [], steps(again)
    assert again.status in ("finished", "compensated"), again.status
