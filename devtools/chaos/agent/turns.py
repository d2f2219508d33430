"""The mcp harness's agent, from one answer to its next call: what it makes of what it was
told (:func:`todo_next`: settled, ask again, follow the reference up, or slip), the call's
arguments (:func:`arguments`), and how long it thinks before it (:func:`pause`).
"""

from __future__ import annotations

from typing import Any

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
from devtools.chaos.agent.intents import (
    CHECK_EFFECT,
    EFFECTS_FOR,
    IDEMPOTENCY_KEY,
    INTENT_REMINDER,
    Ask,
    spelt,
)
from devtools.chaos.agent.model import (
    CHECK,
    CONFIRM,
    FORGET,
    KEY_REUSE,
    NEXT,
    REPHRASE,
    SLIPS,
    TWICE,
    AgentModel,
)

# Pauses (seconds): the model reading an answer and deciding its next call.
THINK_AFTER_UNKNOWN = 0.5
THINK_AFTER_TROUBLE = 0.8
THINK_AFTER_REFUSAL = 0.3


def situation(conversation: Conversation, index: int, count: int) -> str:
    """What the model's dice are seeded by, besides the run's seed: the conversation, the
    intent, how many calls in, how many slips so far."""
    return f"{conversation.spec.n}:{index}:{count}:{len(conversation.slips)}"


def pause(call: Call) -> float:
    if call.seen == UNKNOWN:
        return THINK_AFTER_UNKNOWN
    if call.seen == REFUSED:
        return THINK_AFTER_REFUSAL
    return THINK_AFTER_TROUBLE if call.seen in (DROPPED, ERROR) else 0.0


def todo_next(
    model: AgentModel,
    conversation: Conversation,
    index: int,
    ask: Ask,
    memory: Memory,
    call: Call,
    count: int,
) -> Todo | None:
    """The agent's next call for intent ``index`` after ``call`` (its ``count``-th for it),
    or None once it takes the intent to be settled (``conversation.settled``)."""
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
    action = model.next(
        situation(conversation, index, count),
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
        if model.asks_first(situation(conversation, index, count)):
            return Todo(EFFECTS_FOR, slip=CONFIRM, key=memory.key)
        return Todo(ask.intent, slip=CONFIRM, key=memory.key)
    if action == FORGET:
        return Todo(ask.intent, slip=FORGET)
    if action == CHECK:
        return Todo(CHECK_EFFECT, key=memory.key)
    if action == REPHRASE:
        how = model.spelling(
            situation(conversation, index, count), reminder=ask.intent == INTENT_REMINDER
        )
        return Todo(ask.intent, spelling=how, slip=REPHRASE, key=memory.key)
    if action == TWICE:
        return Todo(ask.intent, slip=TWICE, twice=True, key=memory.key)
    if action == KEY_REUSE:
        return Todo(ask.intent, slip=KEY_REUSE, key=earlier)
    # AGAIN, CORRECT: as it should be asked; a dropped connection needs a new session.
    return Todo(ask.intent, key=memory.key, new_session=seen in (DROPPED, ERROR))


def arguments(ask: Ask, memory: Memory, todo: Todo) -> tuple[dict[str, Any], Any]:
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
