"""The mcp harness's agent (``manage.py chaos --harness mcp``): a client of agentops' MCP
server that reaches its effects through intents alone, and behaves like the models agentops
exists to contain.

Each task of the plan that an intent can carry is a **conversation**: a renewal asks
``charge_invoice(invoice)``; a reminder batch asks ``send_payment_reminder(invoice, reminder)``
for each of its invoices in turn (a trip has no intent: it is not offered over MCP). The agent
talks to the server as production's clients do — the SDK's own client (``mcp.Client``) over
streamable HTTP, on loopback, with an API client's token holding the ``mcp`` scope — and keeps
a session open for as long as it works. It asks until it is told ``done`` or ``not_done``;
on ``unknown`` it follows up with ``check_effect(reference)`` or asks again; when the
connection drops (the server was killed mid-call, the database was restarting) or the server
answers an error, it asks again in a new session.

And it slips, as :class:`AgentModel`'s seeded dice say (after trouble — an unknown, a dropped
connection, an error — about one time in three, three times per conversation at most):

- **rephrase**: it asks again with the invoice spelt otherwise — lower case, padded with
  spaces, in full-width letters with a zero-width space, prefixed with ``Invoice`` (which the
  intent's schema refuses), or the reminder's number as text;
- **forget**: its context is cleared — a new session, no reference, no key of its own; a
  reminder batch starts over from its first invoice; sometimes it asks ``effects_for`` first,
  as the server's instructions tell a model that no longer remembers;
- **twice**: the other API client asks for the same intent at the same moment (two agents
  given one job), besides this one's own call again;
- **key_reuse**: it sends the previous intent's idempotency key with this intent's arguments
  (the server must refuse it, and do nothing);
- **confirm**: told ``done``, it asks once more anyway, or asks ``effects_for``.

Every call is recorded as it was sent and answered (:class:`Call`): the audit
(devtools.chaos.audit.audit_mcp) sets each answer against what the providers did. The dice
are seeded by the run's seed and the situation (the conversation, the intent, how many calls
in, what it was told), so a run replays its agent's choices for the same answers.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import httpx2
from anyio.from_thread import start_blocking_portal
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from agentops.mcp.http import UNAVAILABLE
from devtools.chaos.plan import TaskSpec
from journal.keys import UnsafeName, object_key

INTENT_CHARGE = "charge_invoice"
INTENT_REMINDER = "send_payment_reminder"
CHECK_EFFECT = "check_effect"
EFFECTS_FOR = "effects_for"
IDEMPOTENCY_KEY = "idempotencyKey"
CLIENTS = ("a", "b")
"""The run's two API clients (tokens with the ``mcp`` scope): ``twice`` is the other one."""

# What the agent was told (or not) by a call.
DONE, NOT_DONE, UNKNOWN, REFUSED = "done", "not_done", "unknown", "refused"
DROPPED = "dropped"
"""No answer: the connection failed or closed before one came (nothing was said)."""
ERROR = "error"
"""The server answered a protocol error (JSON-RPC) or an HTTP error, not one of the three
states."""

# What it does next.
AGAIN, CHECK, NEXT, CORRECT = "again", "check", "next", "correct"
REPHRASE, FORGET, TWICE, KEY_REUSE, CONFIRM = "rephrase", "forget", "twice", "key_reuse", "confirm"
SLIPS = (REPHRASE, FORGET, TWICE, KEY_REUSE, CONFIRM)
TROUBLE_SLIPS = (REPHRASE, FORGET, TWICE, KEY_REUSE)

SPELLINGS = ("lower", "spaced", "wide", "prefixed", "as_text")
"""How the invoice (or the reminder's number) is spelt otherwise (:func:`spelt`)."""
_WIDE = {c: chr(ord(c) - 0x21 + 0xFF01) for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-"}
ZERO_WIDTH_SPACE = "\u200b"

# Pauses (seconds): the model reading an answer and deciding its next call.
THINK_AFTER_UNKNOWN = 0.5
THINK_AFTER_TROUBLE = 0.8
THINK_AFTER_REFUSAL = 0.3
NOT_ANSWERED = (CONNECTION_CLOSED, REQUEST_TIMEOUT, UNAVAILABLE)
"""JSON-RPC errors that say the call was not answered: the connection closed, the call timed
out, or the server did not read it (its token could not be checked: nothing was done)."""
CALL_TIMEOUT = 30.0
"""How long a call may take before the agent gives up on it (a dropped call)."""


# --- What a conversation asks for ---------------------------------------------------------------


@dataclass(frozen=True)
class Ask:
    """One intent a conversation asks for: its name, its honest arguments, and the business
    object it names (as the intent's identity names it: ``charge:INV-…``)."""

    intent: str
    args: dict[str, Any]
    object: str

    @property
    def invoice(self) -> str:
        return str(self.args["invoice"])


def asks_of(spec: TaskSpec) -> list[Ask]:
    """The intents a task of the plan becomes over MCP (none for a trip: no intent carries
    one)."""
    if spec.kind == "renewal":
        invoice = spec.refs["invoice"]
        return [Ask(INTENT_CHARGE, {"invoice": invoice}, f"charge:{invoice}")]
    if spec.kind == "reminders":
        return [
            Ask(
                INTENT_REMINDER,
                {"invoice": item["invoice"], "reminder": int(item["reminder"])},
                f"email:reminder:{int(item['reminder'])}:{item['invoice']}",
            )
            for item in spec.refs["invoices"]
        ]
    return []


def invoices_of(specs: Iterable[TaskSpec]) -> list[dict[str, Any]]:
    """The invoices the conversations name, for the payments provider's record: the renewal's
    amount and address; a reminder's address (and an amount of its own)."""
    found: dict[str, dict[str, Any]] = {}
    for spec in specs:
        if spec.kind == "renewal":
            number = spec.refs["invoice"]
            found.setdefault(
                number,
                {
                    "number": number,
                    "amount_due": int(spec.refs["amount"]),
                    "currency": spec.refs.get("currency", "usd"),
                    "customer_email": spec.refs["email"],
                },
            )
        elif spec.kind == "reminders":
            for item in spec.refs["invoices"]:
                found.setdefault(
                    item["invoice"],
                    {
                        "number": item["invoice"],
                        "amount_due": 100 * (1 + len(found) % 90),
                        "currency": "usd",
                        "customer_email": item["email"],
                    },
                )
    return list(found.values())


def spelt(args: Mapping[str, Any], how: str) -> dict[str, Any]:
    """``args`` as a model writes them another time (:data:`SPELLINGS`): the invoice in lower
    case, padded with spaces, in full-width letters with a zero-width space, or prefixed with
    ``Invoice ``; the reminder's number as text (a renewal's invoice padded instead)."""
    out = dict(args)
    invoice = str(args["invoice"])
    if how == "lower":
        out["invoice"] = invoice.lower()
    elif how == "wide":
        out["invoice"] = "".join(_WIDE.get(c, c) for c in invoice[:3]) + invoice[3:]
        out["invoice"] += ZERO_WIDTH_SPACE
    elif how == "prefixed":
        out["invoice"] = f"Invoice {invoice}"
    elif how == "as_text" and "reminder" in args:
        out["reminder"] = str(args["reminder"])
    else:
        out["invoice"] = f"  {invoice} "
    return out


# --- The model: what it does next ---------------------------------------------------------------


@dataclass(frozen=True)
class AgentModel:
    """How the agent misbehaves: after trouble it slips with probability ``rate`` (how, by
    ``weights`` in the order of :data:`TROUBLE_SLIPS`), ``most`` times per conversation at
    most; told done, it asks again (``confirm``) with probability ``confirm``; it opens an
    intent with a key of its own with probability ``own_key``, and with two clients at once
    with probability ``twice``."""

    seed: int
    rate: float = 0.35
    weights: tuple[float, float, float, float] = (0.35, 0.25, 0.25, 0.15)
    most: int = 3
    confirm: float = 0.1
    own_key: float = 0.3
    twice: float = 0.05

    def _dice(self, situation: str) -> random.Random:
        return random.Random(f"{self.seed}:mcp:{situation}")  # noqa: S311 - replayable

    def opening(self, situation: str) -> tuple[bool, str]:
        """How the agent first asks for an intent: whether another client asks at the same
        moment, and where it puts a key of its own (``args``, ``meta``, or ``""``: none)."""
        dice = self._dice(f"{situation}:open")
        twice = dice.random() < self.twice
        key = ""
        if dice.random() < self.own_key:
            key = dice.choice(("args", "meta"))
        return twice, key

    def next(
        self, situation: str, seen: str, slipped: int, *, reference: bool, earlier_key: bool
    ) -> str:
        """What the agent does after being told ``seen`` (or not told: dropped, error), having
        slipped ``slipped`` times in this conversation: :data:`NEXT` (settled: the next
        intent), :data:`AGAIN`, :data:`CHECK` (``check_effect`` on the reference it holds),
        :data:`CORRECT` (asks again as it should have, after a refusal of its own slip), or a
        slip."""
        dice = self._dice(f"{situation}:{seen}")
        can_slip = slipped < self.most
        if seen in (DONE, NOT_DONE):
            if seen == DONE and can_slip and dice.random() < self.confirm:
                return CONFIRM
            return NEXT
        if seen == REFUSED:
            return CORRECT
        if can_slip and dice.random() < self.rate:
            how = dice.choices(TROUBLE_SLIPS, self.weights)[0]
            if how == KEY_REUSE and not earlier_key:
                how = REPHRASE
            return how
        return CHECK if seen == UNKNOWN and reference else AGAIN

    def spelling(self, situation: str, *, reminder: bool) -> str:
        choices = SPELLINGS if reminder else SPELLINGS[:-1]
        return self._dice(f"{situation}:spelling").choice(choices)

    def asks_first(self, situation: str) -> bool:
        """After losing its context, whether it asks ``effects_for`` before acting (as the
        server's instructions say), or just asks for the intent again."""
        return self._dice(f"{situation}:recall").random() < 0.5


# --- What the agent did and was told --------------------------------------------------------------


@dataclass
class Call:
    """One call the agent made, as it was sent and as it was answered."""

    conversation: str
    n: int
    """The plan's task this conversation is."""
    index: int
    """Which of the conversation's intents it is about."""
    intent: str
    object: str
    tool: str
    args: dict[str, Any]
    client: str
    session: int
    slip: str | None
    started: float
    key: str | None = None
    lone: bool = False
    """Made by the other client at the same moment (``twice``)."""
    ended: float | None = None
    outcome: str = ""
    """``answer``, ``error`` (the server answered an error) or ``dropped`` (no answer)."""
    status: str | None = None
    refused: str | None = None
    is_error: bool = False
    reference: str | None = None
    task: str | None = None
    repeated: bool = False
    evidence: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    found: list[dict[str, Any]] = field(default_factory=list)
    """``effects_for``: the effects it listed on the intent's object."""

    @property
    def seen(self) -> str:
        """What the agent makes of the answer."""
        if self.outcome != "answer":
            return self.outcome or DROPPED
        if self.refused:
            return REFUSED
        return self.status or ERROR

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass
class Conversation:
    name: str
    spec: TaskSpec
    asks: list[Ask]
    client: str
    started: float = field(default_factory=time.time)
    ended: float | None = None
    slips: list[str] = field(default_factory=list)
    sessions: int = 0
    keys: dict[int, str] = field(default_factory=dict)
    """The key of its own it sent for each intent (by index), if any."""
    settled: dict[int, str] = field(default_factory=dict)
    """How each intent was last settled for the agent (done, not_done)."""
    failure: str = ""
    """An error of the agent's own (a bug in this harness: the audit counts it lost)."""
    forgot: bool = False
    """Its context was just cleared: the next call it makes is the slip's."""


@dataclass
class Memory:
    """What the agent remembers of the intent it is asking for (lost when it forgets)."""

    reference: str | None = None
    key: str | None = None
    key_place: str = ""


@dataclass(frozen=True)
class Todo:
    """The agent's next call for an intent."""

    tool: str
    spelling: str = ""
    slip: str | None = None
    twice: bool = False
    key: str | None = None
    """The key to send (``key_reuse``: another intent's)."""
    new_session: bool = False


def seen_of_exception(exc: BaseException) -> tuple[str, str]:
    """What a failed call or session says: :data:`DROPPED` when no answer came (the
    connection failed, closed or timed out, or the server said it did not read the call),
    :data:`ERROR` when the server answered an error
    (a JSON-RPC error, an HTTP error status, an answer the SDK could not read); and a
    sentence."""
    leaves: list[BaseException] = []

    def walk(e: BaseException) -> None:
        if isinstance(e, BaseExceptionGroup):
            for inner in e.exceptions:
                walk(inner)
        else:
            leaves.append(e)

    walk(exc)
    said = "; ".join(f"{type(e).__name__}: {e}"[:160] for e in leaves) or repr(exc)[:200]
    for leaf in leaves:
        if isinstance(leaf, MCPError) and leaf.code not in NOT_ANSWERED:
            return ERROR, f"MCP error {leaf.code}: {leaf.message}"
        status = getattr(getattr(leaf, "response", None), "status_code", None)
        if isinstance(status, int):
            return ERROR, f"HTTP {status}"
    no_answer = (
        MCPError,
        httpx2.TransportError,
        OSError,
        TimeoutError,
        anyio.ClosedResourceError,
        anyio.BrokenResourceError,
        anyio.EndOfStream,
    )
    if leaves and all(isinstance(e, no_answer) for e in leaves):
        return DROPPED, said
    return ERROR, said


# --- The agent ------------------------------------------------------------------------------------


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

    def _situation(self, conversation: Conversation, index: int, count: int) -> str:
        return f"{conversation.spec.n}:{index}:{count}:{len(conversation.slips)}"

    async def _settle(self, conversation: Conversation, index: int) -> str:
        """Ask for one intent until the agent is told it is done or not done (NEXT), or it
        forgets (FORGET)."""
        ask = conversation.asks[index]
        memory = Memory()
        count = 0
        twice, place = self.model.opening(self._situation(conversation, index, 0))
        if place:
            memory.key = f"k-{conversation.name}-{index}-{len(conversation.slips)}"
            memory.key_place = place
            conversation.keys[index] = memory.key
        todo: Todo | None = Todo(ask.intent, twice=twice, key=memory.key)
        recall = bool(conversation.slips) and conversation.slips[-1] == FORGET
        if recall and self.model.asks_first(self._situation(conversation, index, 0)):
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
                        await anyio.sleep(self._pause(call))
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

    def _pause(self, call: Call) -> float:
        if call.seen == UNKNOWN:
            return THINK_AFTER_UNKNOWN
        if call.seen == REFUSED:
            return THINK_AFTER_REFUSAL
        return THINK_AFTER_TROUBLE if call.seen in (DROPPED, ERROR) else 0.0

    def _next(
        self,
        conversation: Conversation,
        index: int,
        ask: Ask,
        memory: Memory,
        call: Call,
        count: int,
    ) -> Todo | None:
        seen = call.seen
        if call.tool == EFFECTS_FOR:
            # What the journal says of the object: done settles it; anything else, ask.
            if call.outcome == "answer" and any(e.get("status") == DONE for e in call.found):
                conversation.settled[index] = DONE
                return None
            return Todo(ask.intent, key=memory.key)
        if call.outcome == "answer" and call.reference and not call.refused:
            memory.reference = call.reference
        # Asked again after done (it moves on whatever it hears), or told not done by
        # check_effect: settled either way, as the agent reads it.
        again = call.slip == CONFIRM or (call.tool == CHECK_EFFECT and seen == NOT_DONE)
        if again and seen in (DONE, NOT_DONE):
            conversation.settled[index] = seen
            return None
        earlier = conversation.keys.get(index - 1) if index else None
        action = self.model.next(
            self._situation(conversation, index, count),
            seen,
            len(conversation.slips),
            reference=memory.reference is not None,
            earlier_key=earlier is not None,
        )
        if action == NEXT:
            conversation.settled[index] = seen
            return None
        if action in SLIPS:
            conversation.slips.append(action)
        if action == CONFIRM:
            if self.model.asks_first(self._situation(conversation, index, count)):
                return Todo(EFFECTS_FOR, slip=CONFIRM, key=memory.key)
            return Todo(ask.intent, slip=CONFIRM, key=memory.key)
        if action == FORGET:
            return Todo(ask.intent, slip=FORGET)
        if action == CHECK:
            return Todo(CHECK_EFFECT, key=memory.key)
        if action == REPHRASE:
            how = self.model.spelling(
                self._situation(conversation, index, count), reminder=ask.intent == INTENT_REMINDER
            )
            return Todo(ask.intent, spelling=how, slip=REPHRASE, key=memory.key)
        if action == TWICE:
            return Todo(ask.intent, slip=TWICE, twice=True, key=memory.key)
        if action == KEY_REUSE:
            return Todo(ask.intent, slip=KEY_REUSE, key=earlier)
        # AGAIN, CORRECT: as it should be asked; a dropped connection needs a new session.
        return Todo(ask.intent, key=memory.key, new_session=seen in (DROPPED, ERROR))

    def _arguments(self, ask: Ask, memory: Memory, todo: Todo) -> tuple[dict[str, Any], Any]:
        """The call's arguments and ``_meta``."""
        if todo.tool == CHECK_EFFECT:
            return {"reference": memory.reference or ask.object}, None
        if todo.tool == EFFECTS_FOR:
            return {"reference": ask.invoice}, None
        args = spelt(ask.args, todo.spelling) if todo.spelling else dict(ask.args)
        if todo.key is None:
            return args, None
        if memory.key_place == "meta" and todo.slip != KEY_REUSE:
            return args, {IDEMPOTENCY_KEY: todo.key}
        return {**args, IDEMPOTENCY_KEY: todo.key}, None

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
        args, meta = self._arguments(ask, memory, todo)
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
                if _same_object(e.get("object"), ask.object)
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


def _same_object(found: Any, wanted: str) -> bool:
    if not isinstance(found, str):
        return False
    try:
        return object_key(found) == object_key(wanted)
    except UnsafeName:
        return False


def calls_by_conversation(calls: Sequence[Call]) -> dict[str, list[Call]]:
    out: dict[str, list[Call]] = {}
    for call in calls:
        out.setdefault(call.conversation, []).append(call)
    return out
