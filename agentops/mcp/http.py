"""Streamable HTTP, behind a token gate: every request carries an API client's token
(``Authorization: Bearer ao_live_…``, as the HTTP API's) whose client holds the ``mcp``
scope, or it is refused before the MCP layer sees it — 401 without a live token, 403 without
the scope, 429 past the client's rate limit, 503 while its database does not answer (as a
JSON-RPC error an MCP client shows: the request was not read, nothing was done). The server
listens on loopback unless told otherwise, and the SDK refuses a ``Host`` or ``Origin`` that
is not loopback's there (DNS rebinding)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio.to_thread
from django.db import DatabaseError, connections
from starlette.applications import Starlette

from agentops.api.auth import api_client_authenticate, api_client_count
from agentops.mcp.server import CLIENT_SCOPE_KEY, build_server
from agentops.models import ApiScope

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PATH = "/mcp"
UNAVAILABLE = -32050
"""The JSON-RPC error (a server error of ours) a request is answered with when agentops
cannot check its token for a moment: it was not read, and nothing was done."""
UNAVAILABLE_RETRY = 1


def _admit(header: str) -> tuple[int, str, str | None, int | None]:
    """(status, detail, client name, retry after) for a request's Authorization header."""
    try:
        scheme, _, token = header.partition(" ")
        client = (
            api_client_authenticate(token=token.strip()) if scheme.lower() == "bearer" else None
        )
        if client is None:
            return (
                401,
                "an API client's token is required (Authorization: Bearer ao_live_…)",
                None,
                None,
            )
        if ApiScope.MCP.value not in client.scopes:
            return (
                403,
                f"this client ({client.name}) may not {ApiScope.MCP.label}: its token lacks the "
                f"scope {ApiScope.MCP.value}; create a client with --scope {ApiScope.MCP.value}",
                None,
                None,
            )
        retry_after = api_client_count(client=client)
        if retry_after is not None:
            return 429, f"rate limit: try again in {retry_after} s", None, retry_after
        return 200, "", client.name, None
    except DatabaseError as exc:
        # A restart of the database, say: the request is not read, so nothing is done, and
        # the client is told so (found by the chaos run's MCP harness).
        return (
            503,
            f"agentops could not check this request's token just now ({type(exc).__name__}: "
            "its database did not answer): the request was not read and nothing was done; "
            "send it again in a moment",
            None,
            UNAVAILABLE_RETRY,
        )
    finally:
        connections.close_all()


class TokenGate:
    """ASGI middleware: only requests of a client with the ``mcp`` scope pass."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        header = headers.get(b"authorization", b"").decode("latin-1")
        status, detail, client, retry_after = await anyio.to_thread.run_sync(_admit, header)
        if client is None:
            extra = [(b"www-authenticate", b'Bearer realm="agentops"')] if status == 401 else []
            if retry_after is not None:
                extra.append((b"retry-after", str(retry_after).encode()))
            said: dict[str, Any] = {"detail": detail}
            if status == 503:
                # As a JSON-RPC error, so that an MCP client shows its words, not "error".
                error = {"code": UNAVAILABLE, "message": detail}
                said = {"jsonrpc": "2.0", "id": None, "error": error}
            body = json.dumps(said).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        *extra,
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        scope[CLIENT_SCOPE_KEY] = client
        await self.app(scope, receive, send)


def http_app(*, host: str) -> tuple[Starlette, ASGIApp]:
    """The streamable HTTP app at ``/mcp`` (the SDK's), and the gate in front of it (what is
    served). The SDK guards ``Host`` and ``Origin`` for a loopback ``host``."""
    app = build_server().streamable_http_app(streamable_http_path=PATH, host=host)
    return app, TokenGate(app)
