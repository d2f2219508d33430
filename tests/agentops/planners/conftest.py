"""Shared by the model adapters' tests: the sandbox providers, a fake model server, a renewal."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from agentops.tools import tool_registry
from journal.models import Step, Task
from journal.policy import Policy
from journal.protocols import Planner, StepFact, TaskFacts
from journal.record import task_create
from journal.run import task_advance
from tests.agentops.planners.fakes import FakeModelServer, serve

AT_ONCE = Policy(lookup_schedule=(0.0, 0.0, 0.0))


@pytest.fixture
def fake_model() -> Iterator[FakeModelServer]:
    yield from serve()


@pytest.fixture
def providers(on_sandbox: dict[str, Any]) -> Iterator[None]:
    """The real tools, pointed at the sandbox providers."""
    with override_settings(**on_sandbox, TOOL_TIMEOUT_SECONDS=2.0):
        yield


def charge_args(inv: str) -> dict[str, Any]:
    return {"invoice": inv, "amount": 4900, "currency": "usd", "payment_method": "pm_card_visa"}


def receipt_args(inv: str) -> dict[str, Any]:
    return {
        "to": "ada@example.com",
        "subject": f"Receipt for {inv}",
        "body": f"Thank you: we received your payment of 49.00 for {inv}.",
        "reference": inv,
        "purpose": "receipt",
    }


def renewal_goal(inv: str) -> tuple[str, dict[str, Any]]:
    goal = f"Renew the subscription: charge invoice {inv} and email the receipt."
    refs = {
        "invoice": inv,
        "amount": 4900,
        "currency": "usd",
        "payment_method": "pm_card_visa",
        "email": "ada@example.com",
    }
    return goal, refs


def run_renewal(planner: Planner, inv: str) -> tuple[Task, list[Step]]:
    """A renewal decided by ``planner``, run with the real tools until it stops."""
    goal, refs = renewal_goal(inv)
    task = task_create(kind="renewal", goal=goal, refs=refs)
    result = task_advance(task_id=task.pk, planner=planner, tools=tool_registry(), policy=AT_ONCE)
    task.refresh_from_db()
    assert result.stopped == task.status
    return task, list(Step.objects.filter(task=task).order_by("n"))


def facts_with(*steps: StepFact) -> TaskFacts:
    return TaskFacts(
        task_id="t-1", kind="renewal", goal="charge INV-1", refs={"invoice": "INV-1"}, steps=steps
    )
