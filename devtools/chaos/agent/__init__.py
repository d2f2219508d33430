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

By concern:

- ``intents``: what a conversation asks for (:func:`asks_of`), the invoices it names, and the
  intents' arguments spelt otherwise (:func:`spelt`);
- ``calls``: what the agent did and was told (:class:`Call`, :class:`Conversation`) and what
  it remembers and means to do next (:class:`Memory`, :class:`Todo`);
- ``model``: how it misbehaves (:class:`AgentModel`, its seeded dice);
- ``turns``: from what it was told to its next call, that call's arguments, and its pauses;
- ``wire``: what a failed call or session says (no answer, or an error in place of a state);
- ``client``: :class:`Agent`, the conversations in one event loop, on the SDK's own client.
"""

from devtools.chaos.agent.calls import (
    DONE,
    DROPPED,
    ERROR,
    NOT_DONE,
    REFUSED,
    UNKNOWN,
    Call,
    Conversation,
    Memory,
    Todo,
)
from devtools.chaos.agent.client import Agent
from devtools.chaos.agent.intents import (
    CHECK_EFFECT,
    CLIENTS,
    EFFECTS_FOR,
    IDEMPOTENCY_KEY,
    INTENT_CHARGE,
    INTENT_REMINDER,
    SPELLINGS,
    ZERO_WIDTH_SPACE,
    Ask,
    asks_of,
    invoices_of,
    spelt,
)
from devtools.chaos.agent.model import (
    AGAIN,
    CHECK,
    CONFIRM,
    CORRECT,
    FORGET,
    KEY_REUSE,
    NEXT,
    REPHRASE,
    SLIPS,
    TROUBLE_SLIPS,
    TWICE,
    AgentModel,
)
from devtools.chaos.agent.wire import CALL_TIMEOUT, NOT_ANSWERED, seen_of_exception

__all__ = [
    "AGAIN",
    "CALL_TIMEOUT",
    "CHECK",
    "CHECK_EFFECT",
    "CLIENTS",
    "CONFIRM",
    "CORRECT",
    "DONE",
    "DROPPED",
    "EFFECTS_FOR",
    "ERROR",
    "FORGET",
    "IDEMPOTENCY_KEY",
    "INTENT_CHARGE",
    "INTENT_REMINDER",
    "KEY_REUSE",
    "NEXT",
    "NOT_ANSWERED",
    "NOT_DONE",
    "REFUSED",
    "REPHRASE",
    "SLIPS",
    "SPELLINGS",
    "TROUBLE_SLIPS",
    "TWICE",
    "UNKNOWN",
    "ZERO_WIDTH_SPACE",
    "Agent",
    "AgentModel",
    "Ask",
    "Call",
    "Conversation",
    "Memory",
    "Todo",
    "asks_of",
    "invoices_of",
    "seen_of_exception",
    "spelt",
]
