"""The ``anthropic`` planner against a local fake of the Messages API (never the real one)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from django.test import override_settings

from agentops.kinds import tool_registry
from agentops.planners.anthropic import AnthropicPlanner
from agentops.planners.prompting import SYSTEM_PROMPT, PlannerError, tool_use_id
from journal.models import Entry, EntryKind, Step, Task
from journal.outcomes import StepState
from journal.protocols import Call, Finish, StepFact
from tests.agentops.planners.conftest import (
    CUSTOMER_BASE_URL,
    charge_args,
    customer_link_in,
    facts_with,
    receipt_args,
    run_renewal,
    run_renewal_by_its_runner,
)
from tests.agentops.planners.fakes import (
    FakeModelServer,
    anthropic_message,
    anthropic_text,
    anthropic_tool_use,
)
from tests.journal.support import invoice
from tests.sandbox.fixtures import SandboxHandle

API_KEY = "sk-ant-test-agentops"


def planner_for(fake: FakeModelServer, **extra: Any) -> AnthropicPlanner:
    with override_settings(
        ANTHROPIC_API_KEY=API_KEY, ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_MODEL="claude-test"
    ):
        planner = AnthropicPlanner(tool_registry(), **extra)
    assert str(planner.client.base_url).startswith(fake.url)  # never the real service
    return planner


def run_task(fake: FakeModelServer, inv: str) -> tuple[Task, list[Step]]:
    return run_renewal(planner_for(fake), inv)


@pytest.mark.usefixtures("committed", "clean_faults", "providers")
def test_a_renewal_completes_with_the_tool_results_sent_back(
    fake_model: FakeModelServer, payments_sandbox: SandboxHandle, mail_sandbox: SandboxHandle
) -> None:
    inv = invoice()
    script = [
        anthropic_tool_use("charge_customer", charge_args(inv), said="Charging the invoice."),
        anthropic_tool_use("send_email", receipt_args(inv)),
        anthropic_text(f"Charged 49.00 for {inv} and emailed the receipt."),
    ]
    fake_model.script.extend(copy.deepcopy(script))

    task, [charge, email, finish] = run_task(fake_model, inv)

    assert task.status == "finished"
    assert (charge.tool, charge.state, email.tool, email.state) == (
        "charge_customer",
        "done",
        "send_email",
        "done",
    )
    # The model's own words are kept; the task's summary is the journal's account.
    assert finish.kind == "finish"
    assert finish.outcome["planner_summary"] == f"Charged 49.00 for {inv} and emailed the receipt."
    assert finish.detail.startswith(f"2 done. Done: charge_customer for {inv} (charge ch_")
    # Exactly one effect of each in the providers' ledgers.
    [intent] = payments_sandbox.client.ledger(key=charge.key, operation="payment_intents.create")
    assert len(mail_sandbox.client.ledger(key=email.key)) == 1
    assert len(payments_sandbox.client.ledger(reference=charge.key)) == 1
    # The raw responses are the decisions in the journal, for audit.
    assert [charge.decision, email.decision, finish.decision] == script

    first, second, third = fake_model.requests
    for request in fake_model.requests:
        assert request.path == "/v1/messages"
        # The SDK's own authentication: ``x-api-key`` in 0.x, ``Authorization`` in 2.x.
        assert API_KEY in (
            request.headers.get("x-api-key"),
            request.headers.get("authorization", "").removeprefix("Bearer "),
        )
        assert request.headers["anthropic-version"]
        assert request.body["model"] == "claude-test"
        assert request.body["system"] == SYSTEM_PROMPT
        assert request.body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
        assert {t["name"]: t for t in request.body["tools"]} == {
            name: {"name": name, "description": tool.description, "input_schema": tool.schema}
            for name, tool in tool_registry().items()
        }
    [goal] = first.body["messages"]
    assert (
        goal["role"] == "user"
        and inv in goal["content"]
        and '"invoice": "' + inv in goal["content"]
    )

    # 2nd request: goal, the charge as the model's tool_use, its result as the harness's.
    goal2, use, result = second.body["messages"]
    assert goal2 == goal
    assert use == {
        "role": "assistant",
        "content": [
            {
                "type": "tool_use",
                "id": tool_use_id(charge.key),
                "name": "charge_customer",
                "input": charge_args(inv),
            }
        ],
    }
    [block] = result["content"]
    assert result["role"] == "user" and block["type"] == "tool_result"
    assert block["tool_use_id"] == use["content"][0]["id"]
    assert block["content"].startswith(f"status: done — charge_customer for {inv} happened")
    assert intent["object_id"] in block["content"]
    assert "is_error" not in block

    # 3rd request: the same history, plus the receipt and its result.
    assert third.body["messages"][:3] == second.body["messages"]
    email_use, email_result = third.body["messages"][3:]
    assert email_use["content"][0]["id"] == tool_use_id(email.key)
    assert email_use["content"][0]["input"] == receipt_args(inv)
    [email_block] = email_result["content"]
    assert email_block["tool_use_id"] == tool_use_id(email.key)
    assert email_block["content"].startswith(
        "status: done — send_email for receipt:" + inv + " happened"
    )


@pytest.mark.usefixtures("committed", "clean_faults", "providers")
def test_the_receipt_the_model_writes_reaches_the_customer_with_the_link_to_its_page(
    fake_model: FakeModelServer, mail_sandbox: SandboxHandle
) -> None:
    """The model writes the receipt without the customer's link (it is never given one to
    copy); the harness, not the model, ends the email with it, as it binds the recipient."""
    inv = invoice()
    script = [
        anthropic_tool_use("charge_customer", charge_args(inv)),
        anthropic_tool_use("send_email", receipt_args(inv)),
        anthropic_text(f"Charged {inv} and emailed the receipt."),
    ]
    fake_model.script.extend(copy.deepcopy(script))
    with override_settings(
        PLANNER="anthropic",
        ANTHROPIC_API_KEY=API_KEY,
        ANTHROPIC_BASE_URL=fake_model.url,
        ANTHROPIC_MODEL="claude-test",
        CUSTOMER_BASE_URL=CUSTOMER_BASE_URL,
    ):
        task, [charge, email, finish] = run_renewal_by_its_runner(inv)
    assert task.status == "finished" and (charge.state, email.state) == ("done", "done")
    token = customer_link_in(task, email, mail_sandbox, wrote=receipt_args(inv)["body"])
    # The model's own answer stays the decision on record, for audit.
    assert email.decision == script[1]
    # Asked next, the model is shown the email as it was sent: the link in it.
    assert token in json.dumps(fake_model.bodies[2])


def test_an_unknown_step_is_sent_as_unknown_not_as_an_error(fake_model: FakeModelServer) -> None:
    fake_model.script.extend([anthropic_text("Waiting."), anthropic_text("Waiting.")])
    unknown = StepFact(
        n=1,
        tool="charge_customer",
        args=charge_args("INV-1"),
        state=StepState.UNKNOWN,
        detail="the charge timed out after 5 s; the provider may have processed it",
        key="task-1:1",
        guard="charge:INV-1",
    )
    planner = planner_for(fake_model)

    decisions = [planner.decide(facts_with(unknown)) for _ in range(2)]

    assert [d.summary for d in decisions if isinstance(d, Finish)] == ["Waiting.", "Waiting."]
    first, second = fake_model.bodies
    assert first == second  # rebuilt from the facts alone, the same every time
    [block] = first["messages"][2]["content"]
    assert block == {
        "type": "tool_result",
        "tool_use_id": tool_use_id("task-1:1"),
        "content": (
            "status: unknown — charge_customer for INV-1: the charge timed out after 5 s; the "
            "provider may have processed it; checking (reference task-1:1); do not start "
            "another charge_customer for this object meanwhile"
        ),
    }  # no is_error: it may well have happened


def test_a_not_done_step_is_flagged_as_an_error(fake_model: FakeModelServer) -> None:
    fake_model.script.append(anthropic_text("The card was declined."))
    declined = StepFact(
        n=1,
        tool="charge_customer",
        args=charge_args("INV-1"),
        state=StepState.NOT_DONE,
        detail="payment pi_1 did not go through (card_declined)",
        key="task-1:1",
        guard="charge:INV-1",
    )
    decision = planner_for(fake_model).decide(facts_with(declined))
    assert isinstance(decision, Finish) and decision.summary == "The card was declined."
    [block] = fake_model.bodies[0]["messages"][2]["content"]
    assert block["is_error"] is True
    assert block["content"].startswith("status: not_done — charge_customer for INV-1 did not")


def test_the_first_tool_use_is_the_call_and_the_raw_response_comes_with_it(
    fake_model: FakeModelServer,
) -> None:
    response = anthropic_message(
        [
            {"type": "text", "text": "First the charge."},
            {"type": "tool_use", "id": "toolu_a", "name": "charge_customer", "input": {"x": 1}},
            {"type": "tool_use", "id": "toolu_b", "name": "send_email", "input": {"y": 2}},
        ],
        stop_reason="tool_use",
    )
    fake_model.script.append(copy.deepcopy(response))
    decision = planner_for(fake_model).decide(facts_with())
    assert decision == Call("charge_customer", {"x": 1}, raw=response)


@pytest.mark.parametrize(
    "answer",
    [
        {"type": "message", "role": "assistant"},  # no content at all
        anthropic_message([], stop_reason="end_turn"),  # empty
        anthropic_message([{"type": "text", "text": "  "}], stop_reason="end_turn"),
        anthropic_message(
            [{"type": "tool_use", "id": "toolu_x", "input": {}}], stop_reason="tool_use"
        ),
        anthropic_message([{"type": "text", "text": "I will now char"}], stop_reason="max_tokens"),
        (200, b"<html>gateway</html>"),
        (400, {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}),
    ],
    ids=["no-content", "empty", "blank-text", "tool-use-without-name", "cut-off", "html", "400"],
)
def test_a_malformed_or_empty_answer_is_a_planner_error(
    fake_model: FakeModelServer, answer: Any
) -> None:
    fake_model.script.append(answer)
    with pytest.raises(PlannerError):
        planner_for(fake_model).decide(facts_with())
    assert len(fake_model.requests) == 1


@pytest.mark.usefixtures("committed", "clean_faults", "providers")
def test_an_unknown_tool_is_recorded_as_a_rejected_decision_with_its_raw_response(
    fake_model: FakeModelServer, payments_sandbox: SandboxHandle
) -> None:
    inv = invoice()
    wild = anthropic_tool_use("wire_money", {"invoice": inv, "amount": 4900})
    fake_model.script.extend([copy.deepcopy(wild), anthropic_text("I cannot do that.")])

    task, [rejected, finish] = run_task(fake_model, inv)

    assert task.status == "finished" and finish.kind == "finish"
    assert rejected.state == "not_done" and rejected.tool == "wire_money"
    assert rejected.decision == wild
    assert Entry.objects.filter(step=rejected, kind=EntryKind.DECISION_REJECTED).exists()
    assert not Entry.objects.filter(step=rejected, kind=EntryKind.ATTEMPT_STARTED).exists()
    [block] = fake_model.bodies[1]["messages"][2]["content"]
    assert block["is_error"] is True
    assert block["content"].startswith(
        "status: not_done — wire_money was not started: unknown tool"
    )
    assert payments_sandbox.client.ledger(reference=rejected.key) == []


def test_the_client_comes_from_settings(fake_model: FakeModelServer) -> None:
    with override_settings(
        ANTHROPIC_API_KEY=API_KEY,
        ANTHROPIC_BASE_URL=fake_model.url,
        ANTHROPIC_MODEL="claude-x",
        PLANNER_TIMEOUT_SECONDS=7.5,
        PLANNER_MAX_TOKENS=333,
    ):
        planner = AnthropicPlanner(tool_registry())
    assert (planner.client.api_key, planner.client.timeout, planner.client.max_retries) == (
        API_KEY,
        7.5,
        2,  # asking a model has no side effect: the SDK may retry
    )
    fake_model.script.append(anthropic_text("ok"))
    planner.decide(facts_with())
    assert fake_model.bodies[0]["model"] == "claude-x"
    assert fake_model.bodies[0]["max_tokens"] == 333
