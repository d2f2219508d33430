"""charge_customer with the real stripe library over HTTP, against the sandbox, per fault.

Each case asserts the step's outcome as docs/design.md §2 prescribes and the provider's ledger:
exactly one PaymentIntent per step key (none when the request provably never arrived).
Time is shrunk, not faked: the client gives up after 0.3 s, a slow provider takes 0.6 s.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from agentops.kinds import tool_registry
from agentops.provider_events import provider_event_apply, provider_events_unapplied
from journal.models import Entry, EntryKind, Step, Task
from journal.policy import Policy
from journal.protocols import Call
from journal.record import task_create
from journal.run import Advance, task_advance
from tests.journal.support import ScriptedPlanner, invoice, step_key
from tests.sandbox.fixtures import SandboxHandle, stripe_client, wait_for

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")

CLIENT_TIMEOUT = 0.3
SLOW = 0.6  # the provider's effect lands after the client has given up
AT_ONCE = Policy(lookup_schedule=(0.0, 0.0, 0.0))


@pytest.fixture
def payments(
    payments_sandbox: SandboxHandle, on_sandbox: dict[str, Any]
) -> Iterator[SandboxHandle]:
    with override_settings(**on_sandbox, TOOL_TIMEOUT_SECONDS=CLIENT_TIMEOUT):
        yield payments_sandbox
    payments_sandbox.client.config(webhook_url=None)


def charge(inv: str, **change: Any) -> Call:
    args = {"invoice": inv, "amount": 4900, "currency": "usd", "payment_method": "pm_card_visa"}
    return Call("charge_customer", {**args, **change})


def run(decision: Call, policy: Policy = AT_ONCE) -> tuple[Task, Step, Advance]:
    task = task_create(kind="renewal", goal="charge the invoice")
    result = task_advance(
        task_id=task.pk, planner=ScriptedPlanner([decision]), tools=tool_registry(), policy=policy
    )
    task.refresh_from_db()
    return task, Step.objects.get(task=task, n=1), result


def intents(payments: SandboxHandle, key: str) -> list[dict[str, Any]]:
    return payments.client.ledger(key=key, operation="payment_intents.create")


def test_a_plain_charge_is_done_with_the_payment_intent_as_evidence(
    payments: SandboxHandle,
) -> None:
    task, step, _ = run(charge(invoice()))
    [effect] = intents(payments, step.key)
    assert step.state == "done"
    assert step.outcome["evidence"]["payment_intent"] == effect["object_id"]
    assert effect["reference"] == step.key  # the key is in metadata[agentops_key]
    assert task.status == "finished"


@pytest.mark.parametrize(
    ("fault", "options"),
    [
        ("latency_after_effect", {"delay": SLOW}),  # acted, reply too late
        ("drop_after_effect", {}),  # acted, connection closed without a reply
        ("error_500_after", {}),  # acted, then 500 (saved and replayed)
        ("error_500_before", {}),  # 500, nothing happened (not saved)
        ("rate_limit", {}),  # 429
        ("conflict", {}),  # 409
        ("reset_before_read", {}),  # reset after our bytes left
    ],
)
def test_an_uncertain_call_is_unknown_then_settled_done_with_one_charge(
    payments: SandboxHandle, fault: str, options: dict[str, Any]
) -> None:
    payments.client.fault("payment_intents.create", fault, **options)
    _, step, _ = run(charge(invoice()))
    settled = Entry.objects.filter(step=step, kind=EntryKind.STEP_SETTLED).order_by("id")
    # First classified unknown (never "failed"), then settled done by lookup or keyed retry.
    assert [e.data["state"] for e in settled] == ["unknown", "done"]
    assert step.state == "done"
    [effect] = intents(payments, step.key)
    assert step.outcome["evidence"]["payment_intent"] == effect["object_id"]


def test_the_six_second_charge_goes_unknown_then_the_lookup_settles_it(
    payments: SandboxHandle,
) -> None:
    payments.client.fault("payment_intents.create", "latency_before_effect", delay=SLOW)
    policy = Policy(lookup_schedule=(0.0, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2))
    task, step, result = run(charge(invoice()), policy)
    # Timed out at 0.3 s; the immediate lookup finds nothing and the keyed retry is told
    # the first request is still in flight (409): the task waits.
    assert result.stopped == "waiting" and step.state == "unknown"
    wait_for(lambda: intents(payments, step.key), timeout=10, what="the slow charge to land")
    # Run the task each time it is due, as the scheduler will, until it stops waiting.
    wait_for(
        lambda: (
            task_advance(
                task_id=task.pk, planner=ScriptedPlanner([]), tools=tool_registry(), policy=policy
            ).stopped
            != "waiting"
        ),
        timeout=20,
        what="reconciliation to settle the step",
    )
    step.refresh_from_db()
    assert step.state == "done"
    [effect] = intents(payments, step.key)
    assert step.outcome["evidence"]["payment_intent"] == effect["object_id"]
    assert Task.objects.get(pk=task.pk).status == "finished"


def test_a_provider_that_is_down_on_the_first_attempt_means_not_done(
    payments: SandboxHandle,
) -> None:
    payments.client.fault("*", "down", delay=1.0)
    _, step, _ = run(charge(invoice()))
    wait_for(payments.client.health, what="the provider to be back")
    assert step.state == "not_done"
    assert "never sent" in step.detail
    assert intents(payments, step.key) == []


def test_a_declined_card_is_not_done_and_its_one_intent_is_found_by_key(
    payments: SandboxHandle,
) -> None:
    _, step, _ = run(charge(invoice(), payment_method="pm_card_chargeDeclined"))
    assert step.state == "not_done"
    assert "402" in step.detail
    [effect] = intents(payments, step.key)
    outcome = tool_registry()["charge_customer"].lookup({}, key=step.key)
    assert outcome is not None and outcome.state == "not_done"
    assert effect["object_id"] == outcome.data["evidence"]["payment_intent"]


@pytest.mark.parametrize(
    ("card", "code"),
    [
        ("pm_card_chargeDeclined", "generic_decline"),
        ("pm_card_chargeDeclinedInsufficientFunds", "insufficient_funds"),
        ("pm_card_chargeDeclinedExpiredCard", "expired_card"),
    ],
)
def test_a_decline_keeps_the_banks_reason_for_the_customers_page(
    payments: SandboxHandle, card: str, code: str
) -> None:
    _, step, _ = run(charge(invoice(), payment_method=card))
    assert step.state == "not_done" and step.outcome["code"] == code
    # Found again by its key, the decline says the same.
    outcome = tool_registry()["charge_customer"].lookup({}, key=step.key)
    assert outcome is not None and outcome.data["code"] == code


def test_invalid_arguments_never_reach_the_provider(payments: SandboxHandle) -> None:
    before = len(payments.client.ledger())
    _, step, _ = run(charge(invoice(), amount="49.00"))
    assert step.state == "not_done"
    assert "amount: '49.00' is not of type 'integer'" in step.detail
    assert len(payments.client.ledger()) == before


def test_a_key_already_used_with_other_arguments_is_unknown_and_needs_a_human(
    payments: SandboxHandle,
) -> None:
    task = task_create(kind="renewal", goal="charge")
    key = step_key(task.pk, 1)
    # Something else used our key with another amount first (this is a bug by definition).
    stripe_client(payments.url).v1.payment_intents.create(
        params={
            "amount": 100,
            "currency": "usd",
            "payment_method": "pm_card_visa",
            "confirm": True,
        },
        options={"idempotency_key": key},
    )
    inv = invoice()
    task_advance(
        task_id=task.pk,
        planner=ScriptedPlanner([charge(inv)]),
        tools=tool_registry(),
        policy=AT_ONCE,
    )
    step = Step.objects.get(task=task, n=1)
    task.refresh_from_db()
    assert step.state == "unknown" and step.outcome.get("bug") is True
    assert task.status == "needs_human"
    assert len(intents(payments, key)) == 1


def test_refund_charge_undoes_a_charge_once(payments: SandboxHandle) -> None:
    _, charged, _ = run(charge(invoice()))
    intent = charged.outcome["evidence"]["payment_intent"]
    payments.client.fault("refunds.create", "drop_after_effect")
    _, refund, _ = run(Call("refund_charge", {"payment_intent": intent}))
    assert refund.state == "done"
    refunds = payments.client.ledger(key=refund.key, operation="refunds.create")
    assert len(refunds) == 1
    assert refund.outcome["evidence"]["refund"] == refunds[0]["object_id"]


WEBHOOK_SECRET = "whsec_agentops_tests_" + "x" * 16


def test_the_six_second_charge_is_settled_by_the_signed_webhook(
    payments: SandboxHandle, app_server: str
) -> None:
    payments.client.config(
        webhook_url=f"{app_server}/webhooks/stripe", webhook_secret=WEBHOOK_SECRET
    )
    payments.client.fault("payment_intents.create", "latency_before_effect", delay=SLOW)
    # Lookups are an hour away: only the webhook can settle the step in this test.
    with override_settings(STRIPE_WEBHOOK_SECRET=WEBHOOK_SECRET):
        task, step, result = run(charge(invoice()), Policy(lookup_schedule=(3600.0,)))
        assert result.stopped == "waiting" and step.state == "unknown"

        def settled() -> bool:
            # The web server stored the webhook: applying it is a worker's part, done here.
            for provider, event_id in provider_events_unapplied():
                provider_event_apply(provider=provider, event_id=event_id)
            return Step.objects.get(pk=step.pk).state == "done"

        wait_for(settled, timeout=20, what="the webhook to settle the step")
    step.refresh_from_db()
    [effect] = intents(payments, step.key)
    assert step.outcome["evidence"]["payment_intent"] == effect["object_id"]
    note = Entry.objects.get(step=step, kind=EntryKind.WEBHOOK_RECEIVED)
    assert note.data["type"] == "payment_intent.succeeded"
    # The task is runnable again, and its next run finishes without touching the provider.
    assert Task.objects.get(pk=task.pk).status == "runnable"
    after = task_advance(
        task_id=task.pk, planner=ScriptedPlanner([]), tools=tool_registry(), policy=AT_ONCE
    )
    assert after.stopped == "finished"
    assert len(intents(payments, step.key)) == 1
