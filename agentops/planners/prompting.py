"""What both model adapters say the same way: the rules, the goal, the ids of earlier steps.

The conversation a planner sends is rebuilt every time from the journal's facts
(``journal.protocols.TaskFacts``), never from the model's own memory (docs/design.md §4): the goal
and references, then one tool call and one tool result per earlier step, in order. The
result is the three-state text of ``StepFact.result_text`` (docs/design.md §8).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from django.conf import settings

from agentops.effects import Tool
from journal.outcomes import StepState
from journal.protocols import StepFact, TaskFacts

SYSTEM_PROMPT = """\
You are an operations agent. You act only through the tools you are given, and a harness \
runs every tool call you make and records it in a journal.

Rules:
- The harness, not you, decides what happened. Each tool result starts with a status:
  - "status: done" means the action happened; its evidence follows.
  - "status: not_done" means it did not happen; the reason follows, and it is safe to \
decide again (for example with corrected arguments).
  - "status: unknown" means nobody knows yet whether it happened; the harness is checking. \
Do not start another action of the same kind for the same object: never retry it yourself.
- A result that says "refused" or "already done" is final: nothing was sent. Do what it \
says instead (use the task's own values, or go on to the next step); never repeat it.
- Call one tool at a time, and wait for its result before deciding the next step.
- Use the exact references you are given (invoice numbers, customers, addresses); never \
invent them. Amounts of money are integers in minor units (4900 means 49.00).
- When the task is complete, or nothing more can be done, finish by answering without a \
tool call, with a short summary of what was done and what was not."""


# The SDKs' own retries of a model call (it has no side effect, so retrying is safe).
SDK_RETRIES = 2
# The SDKs back off between retries by at most this long (anthropic and openai: 8 s).
SDK_MAX_BACKOFF_SECONDS = 8.0


def planner_budget() -> timedelta:
    """The longest one decision may take: every try timing out, and the backoffs between."""
    seconds = settings.PLANNER_TIMEOUT_SECONDS * (1 + SDK_RETRIES)
    return timedelta(seconds=seconds + SDK_MAX_BACKOFF_SECONDS * SDK_RETRIES)


class PlannerError(Exception):
    """The model could not be asked, or answered with something that is not a decision."""


def goal_message(facts: TaskFacts) -> str:
    """The task as the first user message: its kind, goal and business references (JSON)."""
    refs = json.dumps(dict(facts.refs), sort_keys=True, ensure_ascii=False, default=str)
    return f"Task ({facts.kind}, id {facts.task_id}): {facts.goal}\nReferences: {refs}"


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def tool_use_id(key: str) -> str:
    """The Anthropic ``tool_use`` id of an earlier step: the same every time it is shown."""
    return f"toolu_{_digest(key)}"


def tool_call_id(key: str) -> str:
    """The OpenAI ``tool_call`` id of an earlier step: the same every time it is shown."""
    return f"call_{_digest(key)}"


def step_input(step: StepFact) -> dict[str, Any]:
    """The arguments the model decided, as it is shown them again (always a JSON object)."""
    return dict(step.args)


def step_failed(step: StepFact) -> bool:
    """Only ``not_done`` is an error to the model; ``unknown`` is not (it may have happened)."""
    return step.state == StepState.NOT_DONE


def tool_descriptions(tools: Mapping[str, Tool]) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, description, JSON schema of the arguments) of each tool, sorted by name."""
    return [
        (tool.name, tool.description, dict(tool.schema))
        for _, tool in sorted(tools.items(), key=lambda item: item[0])
    ]
