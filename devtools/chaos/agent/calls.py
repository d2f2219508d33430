"""What the mcp harness's agent did and was told: each call as it was sent and answered
(:class:`Call`), each conversation (:class:`Conversation`), what it remembers of the intent
it is asking for (:class:`Memory`) and the call it means to make next (:class:`Todo`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from devtools.chaos.agent.intents import Ask
from devtools.chaos.plan import TaskSpec

# What the agent was told (or not) by a call.
DONE, NOT_DONE, UNKNOWN, REFUSED = "done", "not_done", "unknown", "refused"
DROPPED = "dropped"
"""No answer: the connection failed or closed before one came (nothing was said)."""
ERROR = "error"
"""The server answered a protocol error (JSON-RPC) or an HTTP error, not one of the three
states."""


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
