"""Shared by the model adapters' tests: the sandbox providers, a fake model server, a renewal."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from agentops.effects import task_start
from agentops.kinds import tool_registry
from agentops.runner import task_run
from commerce.customers.links import link_of
from journal.models import Step, Task
from journal.policy import Policy
from journal.protocols import Planner, StepFact, TaskFacts
from journal.record import task_create
from journal.run import task_advance
from tests.agentops.planners.fakes import FakeModelServer, serve
from tests.sandbox.fixtures import SandboxHandle, http_json

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


def run_renewal_by_its_runner(inv: str, timeout: float = 30) -> tuple[Task, list[Step]]:
    """A renewal started and run as a worker runs it (agentops.runner.task_run: the planner
    PLANNER names, through the harness), in this process, until it stops."""
    goal, refs = renewal_goal(inv)
    task = task_start(kind="renewal", goal=goal, refs=refs)
    deadline = time.monotonic() + timeout
    while True:
        task_run(task_id=task.pk)
        task.refresh_from_db()
        if task.status in ("finished", "needs_human", "cancelled"):
            return task, list(Step.objects.filter(task=task).order_by("n"))
        assert time.monotonic() < deadline, f"task {task.pk} still {task.status}"
        time.sleep(0.05)


CUSTOMER_BASE_URL = "https://shop.example.com"


def customer_link_in(task: Task, email: Step, mail: SandboxHandle, *, wrote: str) -> str:
    """The model wrote ``wrote`` as the email's body; assert the harness ended it with the
    customer's page, bound to the task, and that the customer received that; its token."""
    body = email.args["body"]
    assert body.startswith(wrote + "\n\nYour receipt: " + CUSTOMER_BASE_URL + "/pay/"), body
    found = re.fullmatch(r"(?s).*\n\nYour receipt: \S+/pay/(?P<token>[^/\s]+)/", body)
    assert found, body
    link = link_of(found.group("token"))
    assert (link.problem, link.invoice, link.task_id) == (None, task.refs["invoice"], str(task.pk))
    # What the mail provider delivered: the body the journal holds, link and all.
    sent = http_json("GET", f"{mail.url}/v1/messages/{email.evidence['message']}")
    assert sent.status == 200 and sent.body["body"] == body, sent.body
    assert len(mail.client.ledger(key=email.key)) == 1
    return found.group("token")


def facts_with(*steps: StepFact) -> TaskFacts:
    return TaskFacts(
        task_id="t-1", kind="renewal", goal="charge INV-1", refs={"invoice": "INV-1"}, steps=steps
    )
