"""agentops as an MCP server (issue 18): intents whose keys the caller cannot break — asked
again after a timeout, from two clients at once, after the agent's context was lost, with
the arguments rephrased — land on one journaled effect and are told its outcome; arguments
that do not fit, and a client's key reused for another intent, are refused and do nothing.

Driven by the SDK's own client in process (``tests/agentops/mcp_support.py``); every result is
checked against its tool's ``outputSchema``."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from django.test import override_settings
from mcp_types import CallToolResult

from agentops.effects import task_start
from agentops.models import IntentClientKey, IntentKey
from journal.models import Step, Task
from tests.agentops.mcp_support import Session, data, in_process, mcp_client, run, seed, text
from tests.agentops.test_business_effects import charges_of
from tests.agentops.workers import Fleet
from tests.sandbox.fixtures import REPO, SandboxHandle, wait_for

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")

# Written by the timeout test when set (docs/mcp.md).
TRANSCRIPT_VARIABLE = "AGENTOPS_MCP_TRANSCRIPT"


# --- The timeout case --------------------------------------------------------------------------


def test_a_charge_asked_three_times_while_it_outlasts_the_timeout_is_made_once(
    mcp_world: Fleet, payments_sandbox: SandboxHandle, tmp_path: Path
) -> None:
    """The provider holds the charge 6 s; the worker gives up after 0.5 s. The agent asks
    three times, rephrasing the invoice and reconnecting each time: unknown, unknown, done —
    one charge in the ledger."""
    inv = seed(payments_sandbox)
    name, _ = mcp_client()
    payments_sandbox.client.fault("payment_intents.create", "latency_before_effect", delay=6)
    asked = [
        {"invoice": inv},
        {"invoice": f"  {inv.lower()} "},
        # Full-width letters, a zero-width space, and a key of the agent's own.
        {"invoice": inv.replace("INV", "ＩＮＶ") + "\u200b"},
    ]
    answers: list[CallToolResult] = []
    sessions: list[Session] = []

    async def ask(args: dict[str, Any], **kw: Any) -> None:
        async with in_process(name) as client:
            session = Session(client)
            sessions.append(session)
            answers.append(await session.call("charge_invoice", args, **kw))

    with override_settings(MCP_WAIT_SECONDS=1.5):
        run(lambda: ask(asked[0]))
        # Asked again once the worker's call has timed out (a loaded machine may take longer
        # than the first wait to get there): the second answer is past the timeout.
        wait_for(
            lambda: Step.objects.filter(
                task_id=data(answers[0])["task"], kind="call", state="unknown"
            ).exists(),
            timeout=30,
            interval=0.05,
            what="the charge's call to time out",
        )
        run(lambda: ask(asked[1]))
    first, second = (data(a) for a in answers)
    assert first["status"] == second["status"] == "unknown"
    assert not answers[0].is_error and not answers[1].is_error
    assert first["task"] == second["task"] and second["repeated"] is True
    # The second answer is past the timeout: it says so, names what is checked and when.
    reference = second["reference"]
    assert reference and reference.startswith(f"ao:{first['task']}:")
    said = text(answers[1])
    assert said.startswith("unknown — the charge for invoice ")
    # Said once, in the fields and in the text alike: the first call timed out.
    assert "timed out" in second["reason"] and second["reason"] in said
    assert "the provider may have processed it" in said
    assert f"agentops is checking reference {reference}" in said
    assert f"no other charge for invoice {inv} may start" in said  # as first named
    assert second["expected_at"] and second["waiting_for"]

    step = wait_for(
        lambda: Step.objects.filter(key=reference, state="done").first(),
        timeout=30,
        interval=0.1,
        what="the charge to be found",
    )
    run(lambda: ask(asked[2], meta={"idempotencyKey": f"retry-{inv}"}))
    third = data(answers[2])
    assert third["status"] == "done" and third["reference"] == reference
    assert third["evidence"]["charge"] == step.evidence["charge"]
    assert third["evidence"]["payment_intent"].startswith("pi_")
    assert text(answers[2]).startswith("done — the charge for invoice ")

    [charge] = charges_of(payments_sandbox, inv)
    assert charge["object_id"] == third["evidence"]["payment_intent"]
    assert Task.objects.filter(refs__invoice=inv).count() == 1
    row = IntentKey.objects.get(task_id=first["task"])
    assert row.intent == "charge_invoice" and row.attempts == 1
    assert IntentClientKey.objects.get(key=f"retry-{inv}").intent_id == row.pk

    # Polled by its reference, the answer is the same.
    async def poll() -> CallToolResult:
        async with in_process(name) as client:
            return await Session(client).call("check_effect", {"reference": reference})

    polled = data(run(poll))
    assert polled["status"] == "done" and polled["evidence"] == third["evidence"]
    write_transcript(asked, answers, tmp_path)


def write_transcript(
    asked: list[dict[str, Any]], answers: list[CallToolResult], tmp_path: Path
) -> None:
    """The timeout case as the agent saw it, for the docs (docs/mcp-timeout.md)."""
    lines = [
        "# charge_invoice, asked three times while the charge outlasts the timeout",
        "",
        "Written by `tests/agentops/test_mcp_intents.py` (run with",
        f"`{TRANSCRIPT_VARIABLE}=docs/mcp-timeout.md`), not by hand. The payments sandbox holds",
        "the charge 6 s; the worker's call times out after 0.5 s; each call waits up to 1.5 s;",
        "the third is made once the charge was found (each in a new session: a reconnect).",
        "",
    ]
    for n, (args, answer) in enumerate(zip(asked, answers, strict=True), start=1):
        lines += [
            f"## Call {n}",
            "",
            "```json",
            json.dumps({"name": "charge_invoice", "arguments": args}, ensure_ascii=False),
            "```",
            "",
            "Text:",
            "",
            *(f"> {line}" for line in text(answer).splitlines()),
            "",
            "`structuredContent`:",
            "",
            "```json",
            json.dumps(data(answer), indent=2, ensure_ascii=False),
            "```",
            "",
        ]
    out = "\n".join(lines)
    (tmp_path / "mcp-timeout.md").write_text(out)
    target = os.environ.get(TRANSCRIPT_VARIABLE)
    if target:
        Path(REPO / target).write_text(out)


# --- Two clients, one intent -------------------------------------------------------------------


def test_the_same_intent_from_two_clients_at_once_charges_once(
    mcp_world: Fleet, payments_sandbox: SandboxHandle
) -> None:
    inv = seed(payments_sandbox)
    names = [mcp_client()[0], mcp_client()[0]]
    answers: dict[str, CallToolResult] = {}

    async def both() -> None:
        async def one(name: str, spelling: str) -> None:
            async with in_process(name) as client:
                answers[name] = await Session(client).call("charge_invoice", {"invoice": spelling})

        async with anyio.create_task_group() as group:
            group.start_soon(one, names[0], inv)
            group.start_soon(one, names[1], f" {inv} ")

    run(both)
    first, second = (data(answers[n]) for n in names)
    assert first["status"] == second["status"] == "done"
    assert first["evidence"] == second["evidence"] and first["task"] == second["task"]
    assert sorted([first["repeated"], second["repeated"]]) == [False, True]
    assert len(charges_of(payments_sandbox, inv)) == 1
    [task] = Task.objects.filter(refs__invoice=inv)
    assert task.entries.get(kind="task_created").actor in {f"mcp:{n}" for n in names}


# --- Reminders, after context loss -------------------------------------------------------------


def test_a_reminder_batch_repeated_after_context_loss_sends_nothing_twice(
    mcp_world: Fleet, payments_sandbox: SandboxHandle, mail_sandbox: SandboxHandle
) -> None:
    invoices = [seed(payments_sandbox, customer_email=f"c{n}@example.com") for n in range(3)]
    name, _ = mcp_client()
    asked = [{"invoice": inv, "reminder": 2} for inv in invoices]
    # The agent lost its context and writes the batch again its own way: the number as text
    # (plain, padded, full-width), each invoice in another case, spaced (a no-break space
    # too), with an invisible character. (A control character, a tab say, is refused.)
    rephrased = [
        {"invoice": invoices[0].lower(), "reminder": "2"},
        {"invoice": f"  {invoices[1]}\u00a0", "reminder": " 2 "},
        {"invoice": invoices[2].replace("INV", "Inv") + "\u200b", "reminder": "\uff12"},
    ]
    assert all(r != a for r, a in zip(rephrased, asked, strict=True))

    async def batch(calls: list[dict[str, Any]]) -> list[CallToolResult]:
        async with in_process(name) as client:
            session = Session(client)
            return [await session.call("send_payment_reminder", args) for args in calls]

    first = [data(r) for r in run(lambda: batch(asked))]
    assert [a["status"] for a in first] == ["done"] * 3
    assert all(a["repeated"] is False for a in first)
    # A new session (the context is gone), the same batch rephrased: the same three effects.
    again = [data(r) for r in run(lambda: batch(rephrased))]
    assert [a["status"] for a in again] == ["done"] * 3
    assert [a["evidence"] for a in again] == [a["evidence"] for a in first]
    assert [a["reference"] for a in again] == [a["reference"] for a in first]
    assert [a["object"] for a in again] == [a["object"] for a in first]
    assert all(a["repeated"] is True for a in again)
    sent = [
        m
        for m in mail_sandbox.client.ledger(operation="messages.send")
        if (m["params"].get("headers") or {}).get("X-Agentops-Reference") in invoices
    ]
    assert len(sent) == 3
    assert (
        Task.objects.filter(kind="reminders", refs__invoices__0__invoice__in=invoices).count() == 3
    )

    async def remember(inv: str) -> CallToolResult:
        async with in_process(name) as client:
            return await Session(client).call("effects_for", {"reference": inv})

    listed = data(run(lambda: remember(invoices[0])))
    assert listed["status"] == "known"
    [reminder] = [e for e in listed["effects"] if e["tool"] == "send_email"]
    assert reminder["status"] == "done" and reminder["object"].endswith(f":{invoices[0]}")
    assert reminder["evidence"]["message"] == first[0]["evidence"]["message"]
    assert reminder["at"] and reminder["kind"] == "reminders"


def test_an_intent_whose_effect_another_task_holds_is_told_what_it_waits_for(
    mcp_world: Fleet, payments_sandbox: SandboxHandle
) -> None:
    """A renewal started from the dashboard is charging the invoice (slowly) when the agent
    asks: it is told the charge is being checked, which one, and nothing new starts."""
    inv = seed(payments_sandbox)
    name, _ = mcp_client()
    payments_sandbox.client.fault("payment_intents.create", "latency_before_effect", delay=3)
    refs = {"invoice": inv, "amount": 4900, "email": "ada@example.com"}
    other = task_start(kind="renewal", goal="renew", refs=refs, actor="ops:ada")
    step = wait_for(
        lambda: Step.objects.filter(task=other, tool="charge_customer").first(),
        timeout=20,
        what="the renewal's charge to start",
    )

    async def ask() -> CallToolResult:
        async with in_process(name) as client:
            return await Session(client).call("charge_invoice", {"invoice": inv})

    with override_settings(MCP_WAIT_SECONDS=0.3):
        answer = data(run(ask))
    assert answer["status"] == "unknown" and answer["reference"] == step.key
    assert answer["task"] == str(other.pk) and answer["waiting_for"]
    assert step.key in answer["waiting_for"]
    assert Task.objects.filter(refs__invoice=inv).count() == 1
    assert IntentKey.objects.get(task=other).intent == "charge_invoice"
    wait_for(
        lambda: Step.objects.filter(pk=step.pk, state="done").exists(),
        timeout=30,
        what="the charge to be found",
    )
    assert len(charges_of(payments_sandbox, inv)) == 1


# --- Refusals -----------------------------------------------------------------------------------


def test_invalid_arguments_are_not_done_and_send_nothing(
    mcp_world: Fleet, payments_sandbox: SandboxHandle
) -> None:
    inv = seed(payments_sandbox)
    name, _ = mcp_client()

    async def calls() -> list[CallToolResult]:
        async with in_process(name) as client:
            session = Session(client)
            return [
                await session.call("charge_invoice", {"invoice": f"{inv}; amount=1"}),
                await session.call("charge_invoice", {"invoice": inv, "amount": 1}),
                await session.call("send_payment_reminder", {"invoice": inv, "reminder": 0}),
                await session.call("charge_invoice", {"invoice": "INV-nowhere-0000"}),
            ]

    bad_number, an_amount, reminder_zero, missing = run(calls)
    for result in (bad_number, an_amount, reminder_zero):
        assert result.is_error
        said = data(result)
        assert said["status"] == "not_done" and said["refused"] == "invalid_arguments"
        assert said["reason"].endswith("nothing was done")
    assert "amount" in data(an_amount)["reason"]
    assert data(missing)["refused"] == "not_found" and not missing.is_error
    assert "no invoice numbered INV-nowhere-0000" in data(missing)["reason"]
    assert not Task.objects.filter(refs__invoice=inv).exists()
    assert charges_of(payments_sandbox, inv) == []


def test_a_client_key_reused_with_other_arguments_is_refused(
    mcp_world: Fleet, payments_sandbox: SandboxHandle
) -> None:
    paid, other = seed(payments_sandbox), seed(payments_sandbox)
    name, _ = mcp_client()
    key = f"k-{uuid.uuid4().hex}"

    async def calls() -> list[CallToolResult]:
        async with in_process(name) as client:
            session = Session(client)
            return [
                await session.call("charge_invoice", {"invoice": paid, "idempotencyKey": key}),
                await session.call("charge_invoice", {"invoice": other, "idempotencyKey": key}),
                await session.call("check_effect", {"reference": key}),
            ]

    first, conflict, checked = run(calls)
    assert data(first)["status"] == "done"
    assert conflict.is_error and data(conflict)["refused"] == "key_conflict"
    assert f"idempotency key {key!r} was used for charge_invoice" in data(conflict)["reason"]
    assert not Task.objects.filter(refs__invoice=other).exists()
    assert charges_of(payments_sandbox, other) == []
    # The key still names the first intent.
    assert data(checked)["status"] == "done"
    assert data(checked)["evidence"] == data(first)["evidence"]
