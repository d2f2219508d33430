"""What the MCP tests share (tests/agentops/test_mcp_*.py): API clients, invoices in the system
of record, an SDK session whose every result is checked against its tool's ``outputSchema``,
and the servers — in process with the fleet's settings, and over streamable HTTP.

Driven by the official SDK's own client against real PostgreSQL, real RQ workers (``Fleet``)
and the sandbox providers with faults."""

from __future__ import annotations

import contextlib
import json
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen
from typing import Any

import anyio
import jsonschema
import pytest
from django.test import override_settings
from mcp import Client
from mcp_types import CallToolResult

from agentops.api.auth import api_client_create
from agentops.mcp.server import build_server
from devtools.database import database_url
from devtools.process import end, free_port, spawn, wait_for_port
from tests.agentops.workers import Fleet
from tests.journal.support import invoice
from tests.sandbox.fixtures import SandboxHandle

MCP_RATE_LIMIT = 40
"""Requests a minute an API client may make of the HTTP server the tests start."""


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
        # The SDK validates a result that is not an error; every one is checked here, errors
        # too: each carries structuredContent under its tool's outputSchema.
        assert result.structured_content is not None, result
        jsonschema.validate(result.structured_content, self.schemas[name])
        agrees(result)
        self.results.append((name, result))
        return result


def agrees(result: CallToolResult) -> None:
    """The text says what the structured content says: its status first, and its reason as
    it stands there (agentops/mcp/wire.py says both from the same fields)."""
    fields, said = data(result), text(result)
    assert fields["reason"] in said, (fields, said)
    if "status" in fields:
        assert said.startswith(f"{fields['status']} — "), (fields, said)
    if fields.get("expected_at"):
        assert "answer expected by " in said, (fields, said)


def in_process(name: str, **kw: Any) -> Client:
    return Client(build_server(client=name), **kw)


def run(body: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(body)


def data(result: CallToolResult) -> dict[str, Any]:
    content: dict[str, Any] = result.structured_content
    return content


def text(result: CallToolResult) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


@pytest.fixture
def mcp_world(fleet: Fleet, on_sandbox: dict[str, Any]) -> Iterator[Fleet]:
    """One worker, and the in-process server's settings as the fleet's (short timeouts). An
    intent waits up to 20 s for its effect: long enough on a loaded machine, and no longer than
    it takes when the effect settles sooner."""
    fleet.worker()
    with override_settings(**on_sandbox, TOOL_TIMEOUT_SECONDS=0.5, MCP_WAIT_SECONDS=20.0):
        yield fleet


@contextlib.contextmanager
def mcp_http(world: Fleet, log: Path) -> Iterator[tuple[str, Popen[bytes]]]:
    """``manage.py mcp_server --transport http`` on a free loopback port: its ``/mcp`` URL and
    its process, stopped afterwards if it still runs."""
    port = free_port()
    proc = spawn(
        [sys.executable, "manage.py", "mcp_server", "--transport", "http", "--port", str(port)],
        env={
            **world.env,
            "DATABASE_URL": database_url("web"),  # what faces the network: the web role
            "MCP_WAIT_SECONDS": "20",
            "API_RATE_LIMIT": str(MCP_RATE_LIMIT),
        },
        output=log,
    )
    try:
        wait_for_port(port, what="the MCP server", timeout=30, proc=proc)
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        end(proc, timeout=10)


@pytest.fixture
def mcp_http_server(mcp_world: Fleet, tmp_path: Path) -> Iterator[str]:
    """``manage.py mcp_server --transport http`` on a free loopback port; its ``/mcp`` URL."""
    with mcp_http(mcp_world, tmp_path / "mcp-http.log") as (url, _):
        yield url


@dataclass(frozen=True)
class Posted:
    status: int
    headers: dict[str, str]
    body: str


def post(
    url: str,
    token: str | None,
    *,
    method: str = "tools/list",
    params: dict[str, Any] | None = None,
) -> Posted:
    """One raw JSON-RPC request over HTTP, as any client sends it: its status, headers and
    body."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(  # noqa: S310 - our own loopback server
        url, data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            said = {k.lower(): v for k, v in response.headers.items()}
            return Posted(int(response.status), said, response.read().decode())
    except urllib.error.HTTPError as exc:
        said = {k.lower(): v for k, v in exc.headers.items()}
        return Posted(exc.code, said, exc.read().decode())
