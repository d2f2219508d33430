"""Three states on the wire (issue 18): every result carries ``structuredContent`` valid
against its tool's ``outputSchema`` — refusals, and calls the journal cannot answer, too
(unknown, never an error a model reads as "nothing was done") — for a client of the current
protocol revision and of each older one the SDK still negotiates; and the tools' annotations
are what their declarations say.

Driven by the SDK's own client in process (``tests/agentops/mcp_support.py``)."""

from __future__ import annotations

from typing import Any

import jsonschema
import mcp.client.session
import pytest
from django.db import OperationalError
from django.test import override_settings
from mcp_types import CallToolResult
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_PROTOCOL_VERSION

from agentops.api.auth import api_client_revoke
from agentops.effects import CostClass, intents
from agentops.kinds import tool_registry
from journal.models import Step, Task
from tests.agentops.mcp_support import Session, data, in_process, mcp_client, run, seed, text
from tests.agentops.test_business_effects import charges_of
from tests.agentops.workers import Fleet
from tests.sandbox.fixtures import SandboxHandle, wait_for

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")


# --- When the journal does not answer ------------------------------------------------------------


def test_a_call_the_journal_cannot_answer_is_unknown_never_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A PostgreSQL restart in the middle of an intent's call (found by the chaos run's MCP
    harness: the SDK answered "Internal server error", which a model reads as "failed")."""
    name, _ = mcp_client()

    def restarting(**_: Any) -> Any:
        raise OperationalError("consuming input failed: server closed the connection")

    monkeypatch.setattr("agentops.mcp.services.intent_call", restarting)
    monkeypatch.setattr("agentops.mcp.selectors.check", restarting)
    monkeypatch.setattr("agentops.mcp.selectors.effects_for", restarting)
    monkeypatch.setattr("agentops.mcp.services.record_read", restarting)

    async def calls() -> list[CallToolResult]:
        async with in_process(name) as client:
            session = Session(client)  # each result checked against its outputSchema
            return [
                await session.call("charge_invoice", {"invoice": " INV-3001"}),
                await session.call("check_effect", {"reference": "charge:INV-3001"}),
                await session.call("effects_for", {"reference": "INV-3001"}),
                await session.call("look_up_invoice", {"invoice": "INV-3001"}),
            ]

    charged, checked, listed, looked = run(calls)
    for result in (charged, checked):
        said = data(result)
        assert not result.is_error and said["status"] == "unknown"
        assert said["reason"].startswith("agentops could not finish answering (OperationalError")
        assert said["waiting_for"] == "agentops' journal to answer again"
    assert data(charged)["object"] == "charge:INV-3001" and data(charged)["intent"] == (
        "charge_invoice"
    )
    assert text(charged).startswith("unknown — agentops could not finish answering")
    assert "no other charge for invoice INV-3001 may start" in text(charged)
    # A list that could not be read is unknown — it cannot tell now — and claims nothing
    # about what was done: no count, never "no effect recorded".
    said = data(listed)
    assert not listed.is_error and said["status"] == "unknown"
    assert said["count"] is None and said["effects"] == [] and said["reference"] == "INV-3001"
    assert "cannot be told now, which says nothing of whether anything was" in said["reason"]
    assert text(listed).startswith("unknown — agentops could not finish answering")
    assert "no effect" not in text(listed)
    # A record that could not be read says so.
    assert not looked.is_error and data(looked)["found"] is False
    assert data(looked)["reason"].startswith("could not tell: agentops could not finish")


def test_a_refused_call_is_told_so_in_its_own_tools_schema() -> None:
    """Arguments that do not fit, or a client that may not call: an error, saying nothing was
    done, with structuredContent under the tool's own outputSchema (a list's for effects_for,
    a record's for a READ tool)."""
    name, _ = mcp_client()
    revoked, _ = mcp_client()

    async def calls(who: str) -> list[CallToolResult]:
        async with in_process(who) as client:
            session = Session(client)
            return [
                await session.call("effects_for", {"reference": "x" * 300}),
                await session.call("look_up_invoice", {"invoice": "INV-3001; DROP"}),
                await session.call("check_effect", {"reference": ""}),
            ]

    listed, looked, checked = run(lambda: calls(name))
    assert listed.is_error and data(listed)["status"] == "refused"
    assert data(listed)["refused"] == "invalid_arguments" and data(listed)["count"] is None
    assert data(listed)["reason"].endswith("nothing was done")
    assert looked.is_error and data(looked)["refused"] == "invalid_arguments"
    assert data(looked)["found"] is False and data(looked)["reason"].endswith("nothing was done")
    assert checked.is_error and data(checked)["status"] == "not_done"
    api_client_revoke(name=revoked)
    for result in run(lambda: calls(revoked)):
        assert result.is_error and data(result)["refused"] == "client_refused"
        assert f"API client {revoked} was revoked" in data(result)["reason"]


# --- Older protocol revisions -------------------------------------------------------------------


@pytest.mark.parametrize("revision", HANDSHAKE_PROTOCOL_VERSIONS)
def test_a_client_of_an_older_protocol_revision_gets_the_same_three_states(
    revision: str,
    mcp_world: Fleet,
    payments_sandbox: SandboxHandle,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client that negotiates an older revision by the initialize handshake (each the SDK
    still negotiates, from 2024-11-05) is told unknown, done and not_done as today's is: the
    same structuredContent, valid against the same outputSchema, never unknown as an error."""
    assert revision != LATEST_PROTOCOL_VERSION
    inv = seed(payments_sandbox)
    name, _ = mcp_client()
    # The client offers this revision (the SDK offers its newest handshake revision).
    monkeypatch.setattr(mcp.client.session, "LATEST_HANDSHAKE_VERSION", revision)
    payments_sandbox.client.fault("payment_intents.create", "latency_before_effect", delay=2)
    negotiated: list[str] = []

    async def ask(args: dict[str, Any]) -> CallToolResult:
        async with in_process(name, mode="legacy") as client:
            negotiated.append(client.protocol_version)
            return await Session(client).call("charge_invoice", args)

    with override_settings(MCP_WAIT_SECONDS=0.3):
        unknown = run(lambda: ask({"invoice": inv}))
    assert not unknown.is_error and data(unknown)["status"] == "unknown"
    assert text(unknown).startswith("unknown — ")
    step = wait_for(
        lambda: Step.objects.filter(
            task_id=data(unknown)["task"], tool="charge_customer", state="done"
        ).first(),
        timeout=30,
        interval=0.1,
        what="the charge to be found",
    )
    done = run(lambda: ask({"invoice": f" {inv.lower()}"}))
    assert not done.is_error and data(done)["status"] == "done"
    assert data(done)["reference"] == step.key and data(done)["repeated"] is True
    assert data(done)["evidence"]["payment_intent"].startswith("pi_")
    not_done = run(lambda: ask({"invoice": "INV-nowhere-0000"}))
    assert data(not_done)["status"] == "not_done" and data(not_done)["refused"] == "not_found"
    assert negotiated == [revision] * 3
    assert len(charges_of(payments_sandbox, inv)) == 1
    assert Task.objects.filter(refs__invoice=inv).count() == 1


# --- The tools as declared ----------------------------------------------------------------------


def test_the_tools_and_their_annotations_are_what_is_declared() -> None:
    name, _ = mcp_client()

    async def listing() -> Any:
        async with in_process(name) as client:
            return await client.list_tools()

    tools = {t.name: t for t in run(listing).tools}
    declared = tool_registry()
    for intent in intents().values():
        tool, effect = tools[intent.name], declared[intent.effect]
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is False
        assert tool.annotations.destructive_hint is effect.irreversible
        assert tool.annotations.idempotent_hint is True
        assert tool.annotations.open_world_hint is True
        assert set(tool.input_schema["properties"]) == {
            *intent.schema["properties"],
            "idempotencyKey",
        }
        # An intent never takes an amount or a recipient.
        assert not {"amount", "to", "email", "currency"} & set(tool.input_schema["properties"])
        for read in intent.reads:
            assert declared[read].cost == CostClass.READ
            hints = tools[read].annotations
            assert hints is not None and hints.read_only_hint is True
            assert hints.open_world_hint is True
    assert tools["charge_invoice"].annotations.destructive_hint is False  # a refund undoes it
    assert tools["send_payment_reminder"].annotations.destructive_hint is True  # sent is sent
    for journal_tool in ("check_effect", "effects_for"):
        hints = tools[journal_tool].annotations
        assert hints is not None and hints.read_only_hint is True
        assert hints.open_world_hint is False
    for tool in tools.values():
        jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        assert tool.output_schema["type"] == "object"
    # An intent's identity is the object its effect's tool guards.
    assert intents()["charge_invoice"].identity({"invoice": "INV-1"}) == declared[
        "charge_customer"
    ].guard({"invoice": "INV-1"})
    assert intents()["send_payment_reminder"].identity(
        {"invoice": "INV-1", "reminder": 2}
    ) == declared["send_email"].guard({"purpose": "reminder", "reminder": 2, "reference": "INV-1"})
