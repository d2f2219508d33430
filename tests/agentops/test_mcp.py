"""agentops as an MCP server (issue 18): intents whose keys the caller cannot break, three
states on the wire, the journal as the agent's memory.

Driven by the official SDK's own client — in process, as a stdio subprocess, and over
streamable HTTP with a token — against real PostgreSQL, real RQ workers (``Fleet``) and the
sandbox providers with faults. Every result any test receives is checked against the tool's
``outputSchema`` (``Session.results``)."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jsonschema
import pytest
from django.db import OperationalError
from django.test import Client as DjangoClient
from django.test import override_settings
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from agentops.api.auth import api_client_create
from agentops.effects import CostClass, intents
from agentops.mcp.http import UNAVAILABLE, TokenGate
from agentops.mcp.server import build_server
from agentops.mcp.wire import EFFECTS_FOR
from agentops.models import IntentClientKey, IntentKey
from agentops.runner import task_start
from agentops.tools import tool_registry
from devtools.process import end, free_port, spawn, wait_for_port
from journal.models import Step, Task
from tests.agentops.test_business_effects import charges_of
from tests.agentops.workers import Fleet
from tests.journal.support import invoice
from tests.sandbox.fixtures import REPO, SandboxHandle, wait_for

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")

# Written by the timeout test when set (README, "Connecting an MCP client").
TRANSCRIPT_VARIABLE = "AGENTOPS_MCP_TRANSCRIPT"


def mcp_client(*scopes: str) -> tuple[str, str]:
    """A new API client with these scopes (``mcp`` without any): its name and token."""
    made, token = api_client_create(
        name=f"agent-{uuid.uuid4().hex[:8]}", scopes=list(scopes or ["mcp"])
    )
    return made.name, token


def seed(payments: SandboxHandle, **change: Any) -> str:
    """An open invoice in the system of record, as ``make run``'s seed makes them."""
    number = invoice()
    fields = {"amount_due": 4900, "currency": "usd", "customer_email": "ada@example.com"}
    payments.client.invoice(number=number, **{**fields, **change})
    return number


@dataclass
class Session:
    """One SDK client session: every call's result kept, checked against the listed schema."""

    client: Client
    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)
    results: list[tuple[str, CallToolResult]] = field(default_factory=list)

    async def call(self, name: str, args: dict[str, Any], **kw: Any) -> CallToolResult:
        if not self.schemas:
            listed = await self.client.list_tools()
            self.schemas = {t.name: t.output_schema or {} for t in listed.tools}
        result = await self.client.call_tool(name, args, **kw)
        # The SDK validates a result that is not an error; every one is checked here.
        jsonschema.validate(result.structured_content, self.schemas[name])
        self.results.append((name, result))
        return result


def in_process(name: str) -> Client:
    return Client(build_server(client=name))


def run(body: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(body)


def data(result: CallToolResult) -> dict[str, Any]:
    content: dict[str, Any] = result.structured_content
    return content


def text(result: CallToolResult) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


@pytest.fixture
def world(fleet: Fleet, on_sandbox: dict[str, Any]) -> Iterator[Fleet]:
    """One worker, and the in-process server's settings as the fleet's (short timeouts). An
    intent waits up to 20 s for its effect: long enough on a loaded machine, and no longer than
    it takes when the effect settles sooner."""
    fleet.worker()
    with override_settings(**on_sandbox, TOOL_TIMEOUT_SECONDS=0.5, MCP_WAIT_SECONDS=20.0):
        yield fleet


# --- The timeout case --------------------------------------------------------------------------


def test_a_charge_asked_three_times_while_it_outlasts_the_timeout_is_made_once(
    world: Fleet, payments_sandbox: SandboxHandle, tmp_path: Path
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
        run(lambda: ask(asked[1]))
    first, second = (data(a) for a in answers)
    assert first["status"] == second["status"] == "unknown"
    assert not answers[0].is_error and not answers[1].is_error
    assert first["task"] == second["task"] and second["repeated"] is True
    # The second answer is past the timeout: it says so, names what is checked and when.
    reference = second["reference"]
    assert reference and reference.startswith(f"ao:{first['task']}:")
    said = text(answers[1])
    assert said.startswith("unknown — the call for the charge for invoice ")
    assert "timed out: the provider may have processed it" in said
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
    """The timeout case as the agent saw it, for the README (docs/mcp-timeout.md)."""
    lines = [
        "# charge_invoice, asked three times while the charge outlasts the timeout",
        "",
        "Written by `tests/agentops/test_mcp.py` (run with",
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
    world: Fleet, payments_sandbox: SandboxHandle
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
    world: Fleet, payments_sandbox: SandboxHandle, mail_sandbox: SandboxHandle
) -> None:
    invoices = [seed(payments_sandbox, customer_email=f"c{n}@example.com") for n in range(3)]
    name, _ = mcp_client()

    async def batch() -> list[CallToolResult]:
        async with in_process(name) as client:
            session = Session(client)
            return [
                await session.call("send_payment_reminder", {"invoice": inv, "reminder": 2})
                for inv in invoices
            ]

    first = [data(r) for r in run(batch)]
    assert [a["status"] for a in first] == ["done"] * 3
    assert all(a["repeated"] is False for a in first)
    # The agent lost its context: a new session, the same batch (the number as text, too).
    again = [data(r) for r in run(batch)]
    assert [a["status"] for a in again] == ["done"] * 3
    assert [a["evidence"] for a in again] == [a["evidence"] for a in first]
    assert all(a["repeated"] is True for a in again)
    sent = [
        m
        for m in mail_sandbox.client.ledger(operation="messages.send")
        if (m["params"].get("headers") or {}).get("X-Agentops-Reference") in invoices
    ]
    assert len(sent) == 3

    async def remember(inv: str) -> CallToolResult:
        async with in_process(name) as client:
            return await Session(client).call("effects_for", {"reference": inv})

    listed = data(run(lambda: remember(invoices[0])))
    [reminder] = [e for e in listed["effects"] if e["tool"] == "send_email"]
    assert reminder["status"] == "done" and reminder["object"].endswith(f":{invoices[0]}")
    assert reminder["evidence"]["message"] == first[0]["evidence"]["message"]
    assert reminder["at"] and reminder["kind"] == "reminders"


def test_an_intent_whose_effect_another_task_holds_is_told_what_it_waits_for(
    world: Fleet, payments_sandbox: SandboxHandle
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
    world: Fleet, payments_sandbox: SandboxHandle
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
    world: Fleet, payments_sandbox: SandboxHandle
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

    async def calls() -> list[CallToolResult]:
        async with in_process(name) as client:
            session = Session(client)
            return [
                await session.call("charge_invoice", {"invoice": " INV-3001"}),
                await session.call("check_effect", {"reference": "charge:INV-3001"}),
                await client.call_tool("effects_for", {"reference": "INV-3001"}),
            ]

    charged, checked, listed = run(calls)
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
    # about what was done: no count, never "no effect recorded"; valid against its schema.
    said = data(listed)
    assert not listed.is_error and said["status"] == "unknown"
    assert said["count"] is None and said["effects"] == [] and said["reference"] == "INV-3001"
    assert "cannot be told now, which says nothing of whether anything was" in said["reason"]
    assert "no effect" not in text(listed)
    jsonschema.validate(said, EFFECTS_FOR.output_schema)


def test_a_request_whose_token_cannot_be_checked_is_told_nothing_was_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def restarting(**_: Any) -> Any:
        raise OperationalError("the database system is not yet accepting connections")

    monkeypatch.setattr("agentops.mcp.http.api_client_authenticate", restarting)
    reached: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope)

    sent: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    scope = {"type": "http", "headers": [(b"authorization", b"Bearer ao_live_x")]}
    run(lambda: TokenGate(app)(scope, receive, send))
    assert not reached  # the MCP layer never saw it
    start, body = sent
    assert start["status"] == 503 and (b"retry-after", b"1") in start["headers"]
    error = json.loads(body["body"])
    # A JSON-RPC error, which the SDK's client shows as it is (not "an error response").
    assert error["jsonrpc"] == "2.0" and error["error"]["code"] == UNAVAILABLE
    assert "the request was not read and nothing was done" in error["error"]["message"]


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


# --- stdio, as a subprocess ---------------------------------------------------------------------


def test_over_stdio_as_a_subprocess_the_calls_are_the_configured_clients(
    world: Fleet, payments_sandbox: SandboxHandle
) -> None:
    inv = seed(payments_sandbox)
    name, _ = mcp_client()
    params = StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "mcp_server", "--transport", "stdio"],
        env={**world.env, "MCP_CLIENT": name, "MCP_WAIT_SECONDS": "20"},
        cwd=str(REPO),
    )

    async def over_stdio() -> list[CallToolResult]:
        async with Client(params) as client:
            session = Session(client)
            return [
                await session.call("look_up_invoice", {"invoice": inv}),
                await session.call("charge_invoice", {"invoice": inv}),
                await session.call("charge_invoice", {"invoice": inv}),
            ]

    looked, charged, again = run(over_stdio)
    record = data(looked)["record"]
    assert data(looked)["found"] and record["amount_due"] == 4900
    assert data(charged)["status"] == data(again)["status"] == "done"
    assert data(again)["repeated"] and data(again)["evidence"] == data(charged)["evidence"]
    [task] = Task.objects.filter(refs__invoice=inv)
    assert task.entries.get(kind="task_created").actor == f"mcp:{name}"
    # A task like any other: the HTTP API finds it by its invoice.
    _, reader = mcp_client("tasks:read")
    api = DjangoClient(HTTP_AUTHORIZATION=f"Bearer {reader}")
    listed = api.get("/api/v1/tasks", {"ref": inv}).json()
    assert [t["id"] for t in listed["items"]] == [str(task.pk)]
    assert len(charges_of(payments_sandbox, inv)) == 1


# --- Streamable HTTP with a token ---------------------------------------------------------------


@pytest.fixture
def http_server(world: Fleet, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    proc = spawn(
        [sys.executable, "manage.py", "mcp_server", "--transport", "http", "--port", str(port)],
        env={**world.env, "MCP_WAIT_SECONDS": "20"},
        output=tmp_path / "mcp-http.log",
    )
    try:
        wait_for_port(port, what="the MCP server", timeout=30, proc=proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        end(proc, timeout=10)


def post(url: str, token: str | None) -> int:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(  # noqa: S310 - our own loopback server
        url, data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_over_http_a_token_with_the_mcp_scope_is_required(
    http_server: str, payments_sandbox: SandboxHandle
) -> None:
    _, no_scope = mcp_client("tasks:read")
    name, token = mcp_client()
    assert post(http_server, None) == 401
    assert post(http_server, "ao_live_not-a-token") == 401
    assert post(http_server, no_scope) == 403
    inv = seed(payments_sandbox)

    async def over_http() -> list[CallToolResult]:
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            Client(streamable_http_client(http_server, http_client=http)) as client,
        ):
            session = Session(client)
            return [
                await session.call("charge_invoice", {"invoice": inv}),
                await session.call("effects_for", {"reference": inv}),
            ]

    charged, remembered = run(over_http)
    assert data(charged)["status"] == "done"
    tools = {e["tool"] for e in data(remembered)["effects"] if e["status"] == "done"}
    assert tools == {"charge_customer", "send_email"}  # the charge and its receipt
    [task] = Task.objects.filter(refs__invoice=inv)
    assert task.entries.get(kind="task_created").actor == f"mcp:{name}"
    # A task like any other: the HTTP API finds it by its invoice.
    _, reader = mcp_client("tasks:read")
    api = DjangoClient(HTTP_AUTHORIZATION=f"Bearer {reader}")
    listed = api.get("/api/v1/tasks", {"ref": inv}).json()
    assert [t["id"] for t in listed["items"]] == [str(task.pk)]
