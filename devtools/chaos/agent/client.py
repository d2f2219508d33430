"""The mcp harness's agent (:class:`Agent`): the run's conversations, each a task in one
event loop, in a thread of the run's process, talking to agentops' MCP server with the SDK's
own client over streamable HTTP, one API client's token each.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import anyio.abc
import httpx2
from anyio.from_thread import start_blocking_portal
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from devtools.chaos.agent.calls import DROPPED, ERROR, Call, Conversation, Memory, Todo
from devtools.chaos.agent.intents import (
    CHECK_EFFECT,
    CLIENTS,
    EFFECTS_FOR,
    Ask,
    asks_of,
    same_object,
)
from devtools.chaos.agent.model import FORGET, NEXT, TWICE, AgentModel
from devtools.chaos.agent.turns import THINK_AFTER_TROUBLE, arguments, pause, situation, todo_next
from devtools.chaos.agent.wire import CALL_TIMEOUT, seen_of_exception
from devtools.chaos.plan import TaskSpec


class Agent:
    """The conversations of a run, each a task in one event loop (in a thread of the run's
    process: :meth:`start`, :meth:`converse`, :meth:`stop`)."""

    def __init__(self, *, url: str, tokens: Mapping[str, str], model: AgentModel, run: str) -> None:
        self.url, self.tokens, self.model, self.run = url, dict(tokens), model, run
        self.conversations: list[Conversation] = []
        self.calls: list[Call] = []
        self._portal: Any = None
        self._portal_cm: Any = None
        self._root: Any = None
        self._group: Any = None

    # --- from the run's thread --------------------------------------------------------------

    def start(self) -> None:
        # The SDK's HTTP client logs each request at INFO: thousands of lines in a run.
        for name in ("httpx2", "httpcore", "mcp"):
            logging.getLogger(name).setLevel(logging.WARNING)
        self._portal_cm = start_blocking_portal()
        self._portal = self._portal_cm.__enter__()
        self._root, _ = self._portal.start_task(self._hold)

    def converse(self, spec: TaskSpec) -> bool:
        """Start the conversation for ``spec``; False if no intent carries it (a trip)."""
        asks = asks_of(spec)
        if not asks:
            return False
        client = CLIENTS[self.model._dice(f"{spec.n}:client").randrange(len(CLIENTS))]
        conversation = Conversation(f"{self.run}-{spec.n}", spec, asks, client)
        self.conversations.append(conversation)
        # Not awaited: the conversation goes on in the loop while the run does its work.
        self._portal.start_task_soon(self._converse, conversation)
        return True

    def in_flight(self) -> list[Call]:
        """The calls the agent is waiting on now."""
        return [c for c in list(self.calls) if c.ended is None]

    def ended(self) -> int:
        return sum(1 for c in list(self.conversations) if c.ended is not None)

    def stop(self) -> None:
        """Cancel whatever is still being asked; nothing more is sent."""
        if self._portal is None:
            return
        with contextlib.suppress(Exception):
            self._portal.call(self._portal.stop, True)  # every conversation cancelled
        with contextlib.suppress(Exception):
            self._portal_cm.__exit__(None, None, None)
        self._portal = None
        now = time.time()
        for call in self.calls:
            if call.ended is None:
                call.ended, call.outcome, call.reason = now, DROPPED, "the run ended"

    # --- in the loop ------------------------------------------------------------------------

    async def _hold(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """The task group the other client's calls run in (``twice``), until :meth:`stop`."""
        async with anyio.create_task_group() as group:
            self._group = group
            task_status.started()
            await anyio.sleep_forever()

    @contextlib.asynccontextmanager
    async def _session(self, client: str) -> AsyncIterator[Any]:
        headers = {"Authorization": f"Bearer {self.tokens[client]}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=CALL_TIMEOUT) as http,
            Client(
                streamable_http_client(self.url, http_client=http),
                read_timeout_seconds=CALL_TIMEOUT,
            ) as session,
        ):
            yield session

    async def _converse(self, conversation: Conversation) -> None:
        try:
            index = 0
            while index < len(conversation.asks):
                if await self._settle(conversation, index) == FORGET:
                    index = 0  # a cleared context: the batch starts over
                    conversation.forgot = True
                    continue
                index += 1
        except Exception as exc:  # the harness's own bug: kept, and counted lost
            conversation.failure = f"{type(exc).__name__}: {exc}"[:300]
        conversation.ended = time.time()

    async def _settle(self, conversation: Conversation, index: int) -> str:
        """Ask for one intent until the agent is told it is done or not done (NEXT), or it
        forgets (FORGET)."""
        ask = conversation.asks[index]
        memory = Memory()
        count = 0
        twice, place = self.model.opening(situation(conversation, index, 0))
        if place:
            memory.key = f"k-{conversation.name}-{index}-{len(conversation.slips)}"
            memory.key_place = place
            conversation.keys[index] = memory.key
        todo: Todo | None = Todo(ask.intent, twice=twice, key=memory.key)
        recall = bool(conversation.slips) and conversation.slips[-1] == FORGET
        if recall and self.model.asks_first(situation(conversation, index, 0)):
            todo = Todo(EFFECTS_FOR, key=memory.key)
        while todo is not None:
            conversation.sessions += 1
            session_number = conversation.sessions
            try:
                async with self._session(conversation.client) as session:
                    while todo is not None:
                        count += 1
                        call = await self._call(
                            session, conversation, index, ask, memory, todo, session_number
                        )
                        todo = self._next(conversation, index, ask, memory, call, count)
                        if todo is None or todo.slip == FORGET:
                            break
                        if todo.new_session:
                            break
                        await anyio.sleep(pause(call))
            except Exception as exc:
                # The session failed: the call it was making is answered by nothing; if it
                # could not even open (the server down), the same call is made again.
                seen, said = seen_of_exception(exc)
                failed = self._failed(conversation, session_number, seen, said)
                if failed is not None:
                    count += 1
                    todo = self._next(conversation, index, ask, memory, failed, count)
                await anyio.sleep(THINK_AFTER_TROUBLE)
            if todo is not None and todo.slip == FORGET:
                return FORGET
        return NEXT

    def _next(
        self,
        conversation: Conversation,
        index: int,
        ask: Ask,
        memory: Memory,
        call: Call,
        count: int,
    ) -> Todo | None:
        return todo_next(self.model, conversation, index, ask, memory, call, count)

    async def _call(
        self,
        session: Any,
        conversation: Conversation,
        index: int,
        ask: Ask,
        memory: Memory,
        todo: Todo,
        session_number: int,
        *,
        client: str | None = None,
        lone: bool = False,
    ) -> Call:
        args, meta = arguments(ask, memory, todo)
        call = Call(
            conversation=conversation.name,
            n=conversation.spec.n,
            index=index,
            intent=ask.intent,
            object=ask.object,
            tool=todo.tool,
            args=args,
            client=client or conversation.client,
            session=session_number,
            slip=todo.slip if not lone else TWICE,
            started=time.time(),
            key=todo.key if todo.tool not in (CHECK_EFFECT, EFFECTS_FOR) else None,
            lone=lone,
        )
        if conversation.forgot and not lone:
            # The first call made with a cleared context is the slip's.
            call.slip, conversation.forgot = call.slip or FORGET, False
        self.calls.append(call)
        if todo.twice and not lone:
            other = next(c for c in CLIENTS if c != conversation.client)
            self._group.start_soon(self._lone, conversation, index, ask, other)
        try:
            result = await session.call_tool(
                todo.tool, args, read_timeout_seconds=CALL_TIMEOUT, meta=meta
            )
        except Exception as exc:  # not a cancellation: that ends the session (_settle)
            seen, said = seen_of_exception(exc)
            call.ended, call.outcome, call.reason = time.time(), seen, said
            return call
        call.ended, call.outcome = time.time(), "answer"
        content = result.structured_content or {}
        call.is_error = bool(result.is_error)
        if todo.tool == EFFECTS_FOR:
            call.status = "listed"
            call.found = [
                {k: e.get(k) for k in ("status", "object", "reference", "evidence", "tool", "at")}
                for e in content.get("effects") or []
                if same_object(e.get("object"), ask.object)
            ]
            return call
        call.status = content.get("status")
        call.refused = content.get("refused")
        call.reference = content.get("reference")
        call.task = content.get("task")
        call.repeated = bool(content.get("repeated"))
        call.evidence = dict(content.get("evidence") or {})
        call.reason = str(content.get("reason") or "")[:300]
        if not content:
            call.outcome, call.reason = ERROR, "an answer without structured content"
        return call

    async def _lone(self, conversation: Conversation, index: int, ask: Ask, client: str) -> None:
        """The other client's call for the same intent, at the same moment (``twice``)."""
        conversation.sessions += 1
        number = conversation.sessions
        todo = Todo(ask.intent)
        try:
            async with self._session(client) as session:
                await self._call(
                    session,
                    conversation,
                    index,
                    ask,
                    Memory(),
                    todo,
                    number,
                    client=client,
                    lone=True,
                )
        except Exception as exc:
            seen, said = seen_of_exception(exc)
            for call in self.calls:
                if call.lone and call.session == number and call.ended is None:
                    call.ended, call.outcome, call.reason = time.time(), seen, said

    def _failed(
        self, conversation: Conversation, session_number: int, seen: str, said: str
    ) -> Call | None:
        """The call a failed session was making, now ended with ``seen``; None if it was not
        making one."""
        for call in reversed(self.calls):
            if (
                call.conversation == conversation.name
                and call.session == session_number
                and not call.lone
                and call.ended is None
            ):
                call.ended, call.outcome, call.reason = time.time(), seen, said
                return call
        return None
