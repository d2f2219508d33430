"""The ``openai`` planner: Chat Completions with tool calls, through the official SDK.

``OPENAI_BASE_URL`` makes any OpenAI-compatible server work (vLLM, Ollama, a gateway).
Every decision rebuilds the conversation from the journal's facts: the goal, then for each
earlier step the assistant's ``tool_calls`` (the id derived from the step's key, the
arguments as a JSON string) and a ``role: tool`` message with the step's three-state
result. The first tool call of the answer is the next call; an answer without one finishes
the task. The raw response is returned with the decision, and the journal keeps it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import openai
from django.conf import settings
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
)

from agentops.effects import Tool
from agentops.planners.prompting import (
    SDK_RETRIES,
    SYSTEM_PROMPT,
    PlannerError,
    goal_message,
    planner_budget,
    step_input,
    tool_call_id,
    tool_descriptions,
)
from journal.protocols import Call, Decision, Finish, TaskFacts


def openai_client() -> openai.OpenAI:
    """A client from settings. Asking the model has no side effect, so the SDK may retry."""
    return openai.OpenAI(
        api_key=settings.OPENAI_API_KEY or None,
        base_url=settings.OPENAI_BASE_URL or None,
        timeout=settings.PLANNER_TIMEOUT_SECONDS,
        max_retries=SDK_RETRIES,
    )


def openai_messages(facts: TaskFacts) -> list[ChatCompletionMessageParam]:
    """The conversation so far, from the facts alone."""
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": goal_message(facts)},
    ]
    for step in facts.steps:
        call_id = tool_call_id(step.key)
        arguments = json.dumps(step_input(step), ensure_ascii=False, sort_keys=True)
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": step.tool, "arguments": arguments},
                    }
                ],
            }
        )
        # Chat Completions has no error flag: the text itself says not_done / unknown.
        messages.append({"role": "tool", "tool_call_id": call_id, "content": step.result_text()})
    return messages


class OpenAIPlanner:
    """Implements ``journal.protocols.Planner`` with any Chat Completions model."""

    @property
    def max_duration(self) -> timedelta:
        return planner_budget()

    def __init__(self, tools: Mapping[str, Tool], *, client: openai.OpenAI | None = None) -> None:
        self.tools = tools
        self.client = client if client is not None else openai_client()
        self.model: str = settings.OPENAI_MODEL
        self.max_tokens: int = settings.PLANNER_MAX_TOKENS

    def tool_params(self) -> list[ChatCompletionFunctionToolParam]:
        return [
            {
                "type": "function",
                "function": {"name": name, "description": description, "parameters": schema},
            }
            for name, description, schema in tool_descriptions(self.tools)
        ]

    def decide(self, facts: TaskFacts) -> Decision:
        try:
            response = self.client.chat.completions.create(
                model=self.model,
                max_completion_tokens=self.max_tokens,
                messages=openai_messages(facts),
                tools=self.tool_params(),
                tool_choice="auto",
                parallel_tool_calls=False,
            )
        except (openai.OpenAIError, ValueError) as exc:  # ValueError: a body that is not JSON
            raise PlannerError(f"the OpenAI-compatible API could not be asked: {exc}") from exc
        return decision_from_completion(response)


def _arguments(raw_arguments: object) -> dict[str, Any]:
    """The call's arguments; anything but a JSON object is kept as given, for the journal
    to reject visibly (it never runs a call whose arguments fail the tool's schema)."""
    if not isinstance(raw_arguments, str):
        return {"_unparseable": raw_arguments}
    try:
        parsed = json.loads(raw_arguments) if raw_arguments.strip() else {}
    except ValueError:
        return {"_unparseable": raw_arguments}
    return parsed if isinstance(parsed, dict) else {"_unparseable": raw_arguments}


def decision_from_completion(response: object) -> Decision:
    """The decision in a Chat Completions response (raw kept for audit)."""
    if not isinstance(response, ChatCompletion):
        raise PlannerError(f"the OpenAI API answered with no completion: {response!r:.300}")
    try:
        raw: dict[str, Any] = response.to_dict(mode="json")
        choice = response.choices[0]
        message = choice.message
        finish_reason = choice.finish_reason
        tool_calls = list(message.tool_calls or [])
        content = message.content
    except (AttributeError, IndexError, TypeError, ValueError) as exc:
        raise PlannerError(f"malformed Chat Completions response: {exc!r}") from exc
    if finish_reason == "length":
        raise PlannerError("the model's answer was cut off at max tokens; not a decision")
    if finish_reason == "content_filter" or getattr(message, "refusal", None):
        raise PlannerError("the model refused to answer (or was filtered); not a decision")
    if tool_calls:
        first = tool_calls[0]
        if isinstance(first, ChatCompletionMessageFunctionToolCall):
            name = getattr(first.function, "name", None)
            arguments = _arguments(getattr(first.function, "arguments", None))
        else:  # a custom (free-text) tool call: no such tool here, so the journal rejects it
            name = getattr(getattr(first, "custom", None), "name", None)
            arguments = {"_unparseable": getattr(getattr(first, "custom", None), "input", None)}
        if not isinstance(name, str) or not name:
            raise PlannerError(f"malformed tool call in Chat Completions response: {raw!r:.300}")
        return Call(tool=name, args=arguments, raw=raw)
    text = content.strip() if isinstance(content, str) else ""
    if not text:
        raise PlannerError(f"the model answered with neither a tool call nor text: {raw!r:.300}")
    return Finish(summary=text, raw=raw)
