"""Done needs evidence: a provider that answers 200 without it is not believed (issue 15).

The sandbox performs the effect, then answers 200 with an empty body, with JSON of another
shape, or with an HTML page (a proxy's, a maintenance page's). For every tool, the step is
``unknown`` — never ``done`` with nothing to show — and is then settled by a lookup that
finds the effect with its evidence; the provider's ledger holds it exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import override_settings

from agentops.kinds import tool_registry
from journal.models import Entry, EntryKind, Step, Task
from journal.policy import Policy
from journal.protocols import Call, CostClass
from journal.record import task_create
from journal.run import task_advance
from tests.journal.support import ScriptedPlanner, invoice
from tests.sandbox.fixtures import SandboxHandle

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")

LIES = ("empty_after_effect", "wrong_shape_after_effect", "html_after_effect")
AT_ONCE = Policy(lookup_schedule=(0.0, 0.0, 0.0))


@pytest.fixture(autouse=True)
def providers(on_sandbox: dict[str, Any]) -> Iterator[None]:
    with override_settings(**on_sandbox, TOOL_TIMEOUT_SECONDS=2.0):
        yield


def run(decision: Call) -> Step:
    task = task_create(kind="trip", goal="act once")
    task_advance(
        task_id=task.pk,
        planner=ScriptedPlanner([decision]),
        tools=tool_registry(),
        policy=AT_ONCE,
    )
    return Step.objects.get(task=task, n=1)


def done_first(decision: Call) -> dict[str, Any]:
    """The evidence of an effect made honestly, for an undo to act on."""
    step = run(decision)
    assert step.state == "done", step.detail
    return step.evidence


def charge() -> Call:
    return Call(
        "charge_customer",
        {"invoice": invoice(), "amount": 4900, "currency": "usd", "payment_method": "pm_card_visa"},
    )


def hold() -> Call:
    return Call("hold_flight", {"flight": "TP1351", "passenger": f"Ada {invoice()}"})


def booking() -> Call:
    return Call(
        "book_hotel",
        {
            "hotel": "Alfama",
            "guest": f"Ada {invoice()}",
            "check_in": "2027-03-01",
            "check_out": "2027-03-04",
        },
    )


def email() -> Call:
    return Call(
        "send_email",
        {
            "to": "ada@example.com",
            "subject": "Receipt",
            "body": "Thank you.",
            "reference": invoice(),
            "purpose": "receipt",
        },
    )


# tool -> (the sandbox it talks to, the operation lied about, how to make the call)
CASES: dict[str, tuple[str, str, Callable[[], Call]]] = {
    "charge_customer": ("payments", "payment_intents.create", charge),
    "refund_charge": (
        "payments",
        "refunds.create",
        lambda: Call("refund_charge", {"payment_intent": done_first(charge())["payment_intent"]}),
    ),
    "send_email": ("mail", "messages.send", email),
    "hold_flight": ("bookings", "flight_holds.create", hold),
    "release_flight": (
        "bookings",
        "flight_holds.release",
        lambda: Call("release_flight", {"hold": done_first(hold())["id"]}),
    ),
    "book_hotel": ("bookings", "hotel_bookings.create", booking),
    "cancel_hotel": (
        "bookings",
        "hotel_bookings.cancel",
        lambda: Call("cancel_hotel", {"booking": done_first(booking())["id"]}),
    ),
}


def test_every_tool_is_covered() -> None:
    """Every effect of the shipped kinds (a read has no effect to prove; the example's effects,
    examples/support, are covered by its own tests against its own provider)."""
    tools = tool_registry()
    effects = {n for n, t in tools.items() if t.cost != CostClass.READ}
    assert set(CASES) == {n for n in effects if type(tools[n]).__module__.startswith("commerce.")}
    assert all(tools[n].evidence for n in effects)


@pytest.mark.parametrize("lie", LIES)
@pytest.mark.parametrize("tool", sorted(CASES))
def test_a_200_without_evidence_is_unknown_then_found_by_lookup(
    tool: str,
    lie: str,
    payments_sandbox: SandboxHandle,
    mail_sandbox: SandboxHandle,
    bookings_sandbox: SandboxHandle,
) -> None:
    sandbox = {"payments": payments_sandbox, "mail": mail_sandbox, "bookings": bookings_sandbox}
    provider, operation, make = CASES[tool]
    decision = make()
    sandbox[provider].client.fault(operation, lie)

    step = run(decision)

    ended = Entry.objects.get(step=step, kind=EntryKind.ATTEMPT_ENDED)
    assert ended.data["status"] == 200
    assert ended.data["classified"] == "unknown"
    settled = Entry.objects.filter(step=step, kind=EntryKind.STEP_SETTLED).order_by("id")
    assert [e.data["state"] for e in settled] == ["unknown", "done"]
    assert "without the" in settled[0].data["detail"]
    assert settled[1].data["via"] == "lookup"
    assert step.state == "done"
    assert all(step.evidence.get(name) for name in tool_registry()[tool].evidence)
    assert [f["fault"] for f in sandbox[provider].client.fault_log() if f["key"] == step.key] == [
        lie
    ]
    # The effect happened once, whatever was said about it.
    assert len(sandbox[provider].client.ledger(key=step.key)) == 1
    assert Task.objects.get(pk=step.task_id).status == "finished"
