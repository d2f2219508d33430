"""The MCP server: the SDK's low-level ``Server``, whose handlers parse a call, run one service
or selector in a worker thread (Django's ORM is synchronous), and answer (``wire``).

Every call is made as an API client (``agentops.models.ApiClient``) holding the ``mcp``
scope: on stdio the one the server was started as, on HTTP the one whose token the request
carries (``agentops.mcp.http``). Each intent starts its task as ``mcp:<client>``, in the
dashboard and the HTTP API like any other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

import anyio.to_thread
import mcp_types as types
from django.conf import settings
from django.db import connections
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from agentops.effects import IntentRefused, RecordMissing, RecordUnreadable, intents
from agentops.kinds import tool_registry
from agentops.mcp import selectors, services, wire
from agentops.models import ApiClient, ApiScope

T = TypeVar("T")
logger = logging.getLogger(__name__)

CLIENT_SCOPE_KEY = "agentops.mcp.client"
"""Where the HTTP gate leaves the name of the request's client (the ASGI scope)."""

INSTRUCTIONS = """\
agentops runs business effects (charges, emails) exactly once, and tells you what became of \
them in three states: done (with the provider's evidence), not_done (with the reason) or \
unknown (it may have happened and is being checked: never a failure). Each effect tool names \
one business intent (the charge for an invoice, reminder N of an invoice): calling it again \
for the same intent — after a timeout, a reconnect, or when you no longer remember — never \
acts twice; it tells you the outcome. Amounts and recipients come from the system of record, \
not from you. Use effects_for to learn what was already done for an invoice, and \
check_effect to follow up on a reference."""


class ClientRefused(Exception):
    """No usable client: ``str()`` says why (and the call is refused)."""


def client_get(name: str) -> ApiClient:
    """The live client ``name``, if its token carries the ``mcp`` scope."""
    client = ApiClient.objects.filter(name=name).first()
    if client is None:
        raise ClientRefused(f"there is no API client named {name!r}")
    if client.revoked_at is not None:
        raise ClientRefused(f"API client {name} was revoked on {client.revoked_at}")
    if ApiScope.MCP.value not in client.scopes:
        raise ClientRefused(
            f"API client {name} may not {ApiScope.MCP.label}: its token lacks the scope "
            f"{ApiScope.MCP.value}"
        )
    return client


def _in_thread(work: Callable[[], T]) -> T:
    try:
        return work()
    finally:
        # This worker thread may not run Django again for a while: it keeps no connection.
        connections.close_all()


async def _run(work: Callable[[], T]) -> T:
    return await anyio.to_thread.run_sync(partial(_in_thread, work))


def _client_key(params: types.CallToolRequestParams, ctx: ServerRequestContext[Any]) -> Any:
    """The client's own key for the call, from the arguments, the call's ``idempotencyKey``
    field, or its ``_meta``; None without one. Two different ones are a conflict (``""``)."""
    arguments = params.arguments or {}
    raw = ctx.params if isinstance(ctx.params, Mapping) else {}
    meta = ctx.meta if isinstance(ctx.meta, Mapping) else {}
    given = {
        v
        for v in (
            arguments.get(wire.IDEMPOTENCY_KEY),
            raw.get(wire.IDEMPOTENCY_KEY),
            meta.get(wire.IDEMPOTENCY_KEY),
        )
        if v is not None
    }
    if not given:
        return None
    if len(given) > 1 or not all(isinstance(v, str) for v in given):
        return ""
    return next(iter(given))


def _read_tools() -> dict[str, Any]:
    """The ``READ`` tools the intents read through, served as tools of their own."""
    known = tool_registry()
    names = sorted({n for i in intents().values() for n in i.reads})
    return {n: known[n] for n in names if n in known}


def _reference(params: types.CallToolRequestParams) -> str:
    reference = (params.arguments or {}).get("reference")
    return reference if isinstance(reference, str) else ""


def _refusal(
    reason: str, code: str = "invalid_arguments", *, params: types.CallToolRequestParams
) -> types.CallToolResult:
    """The call itself did nothing (its client, its arguments), told in its tool's own
    ``outputSchema``."""
    said = f"{reason}; nothing was done"
    if params.name == wire.EFFECTS_FOR.name:
        return wire.effects_refused(_reference(params), said, code)
    if params.name in _read_tools():
        return wire.record_result(None, said, refused=code)
    return wire.result(selectors.Answer(state="not_done", refused=code, reason=said))


def _unanswered(params: types.CallToolRequestParams, exc: Exception) -> types.CallToolResult:
    """What a call is told when agentops could not finish answering it, in its tool's own
    ``outputSchema``: for an intent or ``check_effect``, ``unknown`` (it may or may not have
    started what it asked for, and the intent's key keeps any other from starting); for
    ``effects_for``, ``unknown`` (it cannot tell now, which says nothing of what was done); for
    a ``READ`` tool, that the record could not be told."""
    why = f"agentops could not finish answering ({type(exc).__name__}: its database or queue "
    why += "did not answer)"
    name = params.name
    if name == wire.EFFECTS_FOR.name:
        return wire.effects_unknown(_reference(params), why)
    if name in _read_tools():
        return wire.record_result(None, f"could not tell: {why}; ask again in a moment")
    if name not in (*intents(), wire.CHECK_EFFECT.name):
        return _refusal(f"unknown tool {name!r}", params=params)
    answer = selectors.Answer(
        state="unknown",
        reason=f"{why}, so whether this call started what it asked for is not known",
        waiting_for="agentops' journal to answer again",
    )
    if name in intents():
        intent = intents()[name]
        asked = services.intent_asked(intent, dict(params.arguments or {}))
        if isinstance(asked, services.Asked):
            answer = replace(
                answer,
                intent=name,
                object=asked.object,
                noun=intent.noun,
                subject=intent.subject(asked.args),
            )
        else:
            answer = replace(answer, intent=name)
    return wire.result(answer)


def build_server(*, client: str | None = None) -> Server[Any]:
    """The server. ``client`` names the API client every call is made as (stdio); without
    it, each call's client is the one the HTTP gate authenticated."""

    def who(ctx: ServerRequestContext[Any]) -> str:
        if client is not None:
            return client
        request = ctx.request
        scope = getattr(request, "scope", None) or {}
        name = scope.get(CLIENT_SCOPE_KEY)
        if not name:
            raise ClientRefused("this request carries no client's token")
        return str(name)

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        def listing() -> list[types.Tool]:
            known = tool_registry()
            served = [
                wire.intent_tool(intent, known[intent.effect])
                for intent in sorted(intents().values(), key=lambda i: i.name)
                if intent.effect in known
            ]
            served += [wire.read_tool(tool) for tool in _read_tools().values()]
            return [*served, wire.CHECK_EFFECT, wire.EFFECTS_FOR]

        return types.ListToolsResult(tools=await _run(listing))

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            return await answer(ctx, params)
        except Exception as exc:
            # The journal (or the queue) did not answer — a restart, say. The call may or may
            # not have started what it asked for: that is unknown, never an error a model
            # reads as "failed" (found by the chaos run's MCP harness, a PostgreSQL restart).
            logger.exception("MCP call %s could not be answered", params.name)
            return _unanswered(params, exc)

    async def answer(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        name = params.name
        arguments = dict(params.arguments or {})
        try:
            caller = await _run(partial(client_get, who(ctx)))
        except ClientRefused as exc:
            return _refusal(f"refused: {exc}", "client_refused", params=params)
        if name in intents():
            key = _client_key(params, ctx)
            arguments.pop(wire.IDEMPOTENCY_KEY, None)
            answer = await _run(
                partial(
                    services.intent_call,
                    name=name,
                    arguments=arguments,
                    client=caller,
                    client_key=key,
                    wait=float(settings.MCP_WAIT_SECONDS),
                )
            )
            return wire.result(answer)
        reference = arguments.get("reference")
        if name in (wire.CHECK_EFFECT.name, wire.EFFECTS_FOR.name):
            if not isinstance(reference, str) or not reference.strip() or len(reference) > 255:
                return _refusal(
                    "invalid arguments: reference: 1 to 255 characters of text", params=params
                )
            if name == wire.EFFECTS_FOR.name:
                found = await _run(
                    partial(selectors.effects_for, reference=reference, client=caller)
                )
                return wire.effects_result(reference, found)
            checked = await _run(partial(selectors.check, reference=reference, client=caller))
            if checked is None:
                return wire.result(
                    selectors.Answer(
                        state="not_done",
                        refused="unknown_reference",
                        object=None,
                        reason=f"agentops has recorded no effect, intent or key named "
                        f"{reference!r}: nothing was done by that name through agentops; use "
                        "effects_for with a business reference",
                    )
                )
            return wire.result(checked)
        if name in _read_tools():
            try:
                record = await _run(partial(services.record_read, tool=name, args=arguments))
            except RecordMissing as exc:
                return wire.record_result(None, f"not found: {exc}")
            except IntentRefused as exc:
                return _refusal(f"invalid arguments: {exc}", params=params)
            except RecordUnreadable as exc:
                return wire.record_result(None, f"could not tell: {exc}; ask again in a moment")
            return wire.record_result(record, "found")
        return _refusal(f"unknown tool {name!r}", params=params)

    return Server(
        "agentops",
        version="1",
        title="agentops: safe effects",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
