"""The ``openai`` planner against a local fake of Chat Completions (never the real API)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from django.test import override_settings

from agentops.kinds import tool_registry
from agentops.planners.openai import OpenAIPlanner
from agentops.planners.prompting import SYSTEM_PROMPT, PlannerError, tool_call_id
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
    openai_completion,
    openai_text,
    openai_tool_call,
)
from tests.journal.support import invoice
from tests.sandbox.fixtures import SandboxHandle

API_KEY = "sk-test-agentops-openai"


def planner_for(fake: FakeModelServer) -> OpenAIPlanner:
    with override_settings(
        OPENAI_API_KEY=API_KEY, OPENAI_BASE_URL=f"{fake.url}/v1", OPENAI_MODEL="gpt-test"
    ):
        planner = OpenAIPlanner(tool_registry())
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
        openai_tool_call("charge_customer", charge_args(inv)),
        openai_tool_call("send_email", receipt_args(inv)),
        openai_text(f"Charged 49.00 for {inv} and emailed the receipt."),
    ]
    fake_model.script.extend(copy.deepcopy(script))

    task, [charge, email, finish] = run_task(fake_model, inv)

    assert task.status == "finished"
    assert [(s.tool, s.state) for s in (charge, email)] == [
        ("charge_customer", "done"),
        ("send_email", "done"),
    ]
    assert finish.outcome["planner_summary"] == f"Charged 49.00 for {inv} and emailed the receipt."
    assert finish.detail.startswith(f"2 done. Done: charge_customer for {inv} (charge ch_")
    [intent] = payments_sandbox.client.ledger(key=charge.key, operation="payment_intents.create")
    assert len(mail_sandbox.client.ledger(key=email.key)) == 1
    assert [charge.decision, email.decision, finish.decision] == script

    first, second, third = fake_model.requests
    for request in fake_model.requests:
        assert request.path == "/v1/chat/completions"
        assert request.headers["authorization"] == f"Bearer {API_KEY}"
        assert request.body["model"] == "gpt-test"
        assert request.body["parallel_tool_calls"] is False
        assert {t["function"]["name"]: t for t in request.body["tools"]} == {
            name: {
                "type": "function",
                "function": {
                    "name": name,
                    "description": tool.description,
                    "parameters": tool.schema,
                },
            }
            for name, tool in tool_registry().items()
        }
    system, goal = first.body["messages"]
    assert system == {"role": "system", "content": SYSTEM_PROMPT}
    assert goal["role"] == "user" and f'"invoice": "{inv}"' in goal["content"]

    # 2nd request: the charge as the assistant's tool call, its result as a tool message.
    assert second.body["messages"][:2] == [system, goal]
    call, result = second.body["messages"][2:]
    assert call == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": tool_call_id(charge.key),
                "type": "function",
                "function": {
                    "name": "charge_customer",
                    "arguments": json.dumps(charge_args(inv), sort_keys=True),
                },
            }
        ],
    }
    assert result["role"] == "tool" and result["tool_call_id"] == tool_call_id(charge.key)
    assert result["content"].startswith(f"status: done — charge_customer for {inv} happened")
    assert intent["object_id"] in result["content"]

    # 3rd request: the same history, plus the receipt and its result.
    assert third.body["messages"][:4] == second.body["messages"]
    email_call, email_result = third.body["messages"][4:]
    [sent] = email_call["tool_calls"]
    assert sent["id"] == email_result["tool_call_id"] == tool_call_id(email.key)
    assert json.loads(sent["function"]["arguments"]) == receipt_args(inv)
    assert email_result["content"].startswith(
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
        openai_tool_call("charge_customer", charge_args(inv)),
        openai_tool_call("send_email", receipt_args(inv)),
        openai_text(f"Charged {inv} and emailed the receipt."),
    ]
    fake_model.script.extend(copy.deepcopy(script))
    with override_settings(
        PLANNER="openai",
        OPENAI_API_KEY=API_KEY,
        OPENAI_BASE_URL=f"{fake_model.url}/v1",
        OPENAI_MODEL="gpt-test",
        CUSTOMER_BASE_URL=CUSTOMER_BASE_URL,
    ):
        task, [charge, email, finish] = run_renewal_by_its_runner(inv)
    assert task.status == "finished" and (charge.state, email.state) == ("done", "done")
    token = customer_link_in(task, email, mail_sandbox, wrote=receipt_args(inv)["body"])
    # The model's own answer stays the decision on record, for audit.
    assert email.decision == script[1]
    # Asked next, the model is shown the email as it was sent: the link in it.
    assert token in json.dumps(fake_model.bodies[2])


def test_an_unknown_step_is_sent_as_unknown(fake_model: FakeModelServer) -> None:
    fake_model.script.extend([openai_text("Waiting."), openai_text("Waiting.")])
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
    assert first["messages"][3] == {
        "role": "tool",
        "tool_call_id": tool_call_id("task-1:1"),
        "content": (
            "status: unknown — charge_customer for INV-1: the charge timed out after 5 s; the "
            "provider may have processed it; checking (reference task-1:1); do not start "
            "another charge_customer for this object meanwhile"
        ),
    }


def test_the_first_tool_call_is_the_call_and_the_raw_response_comes_with_it(
    fake_model: FakeModelServer,
) -> None:
    calls = [
        {
            "id": "call_a",
            "type": "function",
            "function": {"name": "charge_customer", "arguments": '{"x": 1}'},
        },
        {"id": "call_b", "type": "function", "function": {"name": "send_email", "arguments": "{}"}},
    ]
    response = openai_completion(
        {"role": "assistant", "content": None, "tool_calls": calls}, finish_reason="tool_calls"
    )
    fake_model.script.append(copy.deepcopy(response))
    decision = planner_for(fake_model).decide(facts_with())
    assert decision == Call("charge_customer", {"x": 1}, raw=response)


@pytest.mark.parametrize(
    "answer",
    [
        {"id": "chatcmpl-x", "object": "chat.completion", "choices": []},
        openai_text(""),
        openai_completion({"role": "assistant", "content": None}, finish_reason="stop"),
        openai_completion(
            {"role": "assistant", "content": "I will now char"}, finish_reason="length"
        ),
        openai_completion(
            {"role": "assistant", "content": None, "refusal": "I can't help with that."},
            finish_reason="stop",
        ),
        (200, b"<html>gateway</html>"),
        (401, {"error": {"message": "bad key", "type": "invalid_request_error", "code": None}}),
    ],
    ids=["no-choices", "empty-text", "no-content", "cut-off", "refusal", "html", "401"],
)
def test_a_malformed_or_empty_answer_is_a_planner_error(
    fake_model: FakeModelServer, answer: Any
) -> None:
    fake_model.script.append(answer)
    with pytest.raises(PlannerError):
        planner_for(fake_model).decide(facts_with())
    assert len(fake_model.requests) == 1


@pytest.mark.usefixtures("committed", "clean_faults", "providers")
def test_unparseable_arguments_are_a_rejected_decision_and_nothing_is_sent(
    fake_model: FakeModelServer, payments_sandbox: SandboxHandle
) -> None:
    inv = invoice()
    broken = f'{{"invoice": "{inv}", "amount": 49'
    bad = openai_tool_call("charge_customer", broken)
    fake_model.script.extend([copy.deepcopy(bad), openai_text("I could not charge the invoice.")])

    task, [rejected, finish] = run_task(fake_model, inv)

    assert task.status == "finished" and finish.kind == "finish"
    assert rejected.state == "not_done" and rejected.tool == "charge_customer"
    assert rejected.args == {"_unparseable": broken}
    assert rejected.detail.startswith("invalid arguments: ")
    assert rejected.decision == bad
    assert Entry.objects.filter(step=rejected, kind=EntryKind.DECISION_REJECTED).exists()
    assert not Entry.objects.filter(step=rejected, kind=EntryKind.ATTEMPT_STARTED).exists()
    assert payments_sandbox.client.ledger(key=rejected.key) == []
    assert payments_sandbox.client.ledger(reference=rejected.key) == []
    # The model is told, in the next request, that it did not happen and why.
    call, result = fake_model.bodies[1]["messages"][2:]
    assert json.loads(call["tool_calls"][0]["function"]["arguments"]) == {"_unparseable": broken}
    assert result["tool_call_id"] == call["tool_calls"][0]["id"] == tool_call_id(rejected.key)
    assert result["content"].startswith(
        "status: not_done — charge_customer was not started: invalid arguments: "
    )
    assert result["content"].endswith("; safe to decide again")


def test_the_client_comes_from_settings(fake_model: FakeModelServer) -> None:
    with override_settings(
        OPENAI_API_KEY=API_KEY,
        OPENAI_BASE_URL=f"{fake_model.url}/compat/v1",
        OPENAI_MODEL="local-model",
        PLANNER_TIMEOUT_SECONDS=7.5,
        PLANNER_MAX_TOKENS=333,
    ):
        planner = OpenAIPlanner(tool_registry())
    assert (planner.client.api_key, planner.client.timeout, planner.client.max_retries) == (
        API_KEY,
        7.5,
        2,  # asking a model has no side effect: the SDK may retry
    )
    fake_model.script.append(openai_text("ok"))
    planner.decide(facts_with())
    assert fake_model.requests[0].path == "/compat/v1/chat/completions"  # any compatible server
    assert fake_model.bodies[0]["model"] == "local-model"
    assert fake_model.bodies[0]["max_completion_tokens"] == 333
