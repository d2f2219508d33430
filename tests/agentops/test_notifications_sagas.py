"""Notifications from sagas (issue 20): a trip held for a person's approval is told once as
awaiting_approval, then once as finished; a trip that compensates is told once as
compensated, never also as finished. Trips run in this process against the sandbox
providers; the receiver is the one of tests/agentops/test_notifications.py."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from agentops import runner
from agentops.effects import task_start
from agentops.notifications import services
from agentops.notifications.models import DeliveryState
from agentops.operators.services import task_approve
from journal.models import Approval, Step, Task
from tests.agentops.test_notifications import (
    Receiver,
    attempted_until_settled,
    deliveries,
    notify_settings,
    notifying_world,
    receiving,
)
from tests.agentops.test_sagas import trip_refs
from tests.sandbox.fixtures import SandboxHandle

pytestmark = pytest.mark.usefixtures("committed")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as rcv:
        yield rcv


@pytest.fixture
def world() -> Iterator[Any]:
    with notifying_world() as conn:
        yield conn


SAGA_OVER = ("finished", "compensated", "cancelled", "needs_human", "awaiting_approval")


@pytest.fixture
def sagas(world: Any, on_sandbox: dict[str, Any], receiver: Receiver) -> Iterator[None]:
    """Trips run in this process by the scripted planner against the sandbox providers, with
    notifications on."""
    with override_settings(
        **on_sandbox, **notify_settings(receiver.url), PLANNER="scripted", TOOL_TIMEOUT_SECONDS=1.0
    ):
        yield


def run(task: Task, timeout: float = 30) -> Task:
    """Run the task as a worker would, in this process, until it stops."""
    deadline = time.monotonic() + timeout
    while True:
        runner.task_run(task_id=task.pk)
        task = Task.objects.get(pk=task.pk)
        if task.status in SAGA_OVER:
            return task
        assert time.monotonic() < deadline, f"task {task.pk} still {task.status}"
        time.sleep(0.05)


def delivered_once(task: Task, event: str, receiver: Receiver) -> dict[str, Any]:
    """The task's one delivery of ``event``: derived once, sent once; the body it carried."""
    (delivery,) = [d for d in deliveries(task) if d.event == event]
    delivery = attempted_until_settled(delivery.pk)
    assert delivery.state == DeliveryState.DONE and delivery.attempts == 1
    (sent,) = receiver.of(delivery.key)
    assert sent.verified and sent.answer == "processed" and sent.event == f"task.{event}"
    body: dict[str, Any] = json.loads(sent.body)
    assert body["task"]["id"] == str(task.pk) and body["task"]["status"] == event
    return body


def test_a_held_saga_notifies_awaiting_approval_once(sagas: None, receiver: Receiver) -> None:
    # Above 3,000.00 a person approves the charge before the card is touched.
    task = run(task_start(kind="trip", goal="a big trip", refs=trip_refs(amount=400000)))
    assert task.status == "awaiting_approval"
    held = Approval.objects.get(task=task, state="pending")
    assert len(services.notifications_derive()) == 1
    assert [d.event for d in deliveries(task)] == ["awaiting_approval"]
    body = delivered_once(task, "awaiting_approval", receiver)
    assert body["event"] == "task.awaiting_approval" and body["approval"] == held.pk
    assert body["tool"] == "charge_customer" and "above 3,000.00 USD" in body["reason"]
    # Run again while it waits (a sweep, a redelivered job): nothing new to tell.
    runner.task_run(task_id=task.pk)
    assert Task.objects.get(pk=task.pk).status == "awaiting_approval"
    assert services.notifications_derive() == []

    # Approved, it finishes: one more event, finished, and still one awaiting_approval.
    assert task_approve(
        task_id=task.pk, approval_id=held.pk, digest=held.digest, actor="ops@example.com"
    )
    assert run(task).status == "finished"
    assert len(services.notifications_derive()) == 1
    assert [d.event for d in deliveries(task)] == ["awaiting_approval", "finished"]
    delivered_once(task, "finished", receiver)
    assert len(receiver.processed) == 2


def test_a_compensated_saga_notifies_compensated_once(
    sagas: None, receiver: Receiver, bookings_sandbox: SandboxHandle
) -> None:
    refs = trip_refs()
    bookings_sandbox.client.config(full_hotels=[refs["hotel"]])
    try:
        task = run(task_start(kind="trip", goal="Lisbon, hotel full", refs=refs))
    finally:
        bookings_sandbox.client.config(full_hotels=[])
    assert task.status == "compensated"
    assert Step.objects.get(task=task, tool="release_flight").state == "done"
    assert len(services.notifications_derive()) == 1
    assert services.notifications_derive() == []
    # Its end is a task_finished entry too: told as compensated, never also as finished.
    assert [d.event for d in deliveries(task)] == ["compensated"]
    body = delivered_once(task, "compensated", receiver)
    assert body["event"] == "task.compensated" and body["summary"].startswith("Compensated.")
    assert body["task"]["previous_status"] == "runnable"
    assert len(receiver.processed) == 1
