"""The ``anthropic`` planner: the Messages API with tool use, through the official SDK.

Every decision rebuilds the conversation from the journal's facts: the goal, then for each
earlier step the ``tool_use`` the model made (its id derived from the step's key) and a
``tool_result`` carrying the step's three-state result. The first ``tool_use`` block of the
answer is the next call; an answer without one finishes the task. The raw response is
returned with the decision, and the journal keeps it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import anthropic
from anthropic.types import (
    Message,
    MessageParam,
    TextBlock,
    ToolParam,
    ToolResultBlockParam,
    ToolUseBlock,
    ToolUseBlockParam,
)
from django.conf import settings

from agentops.effects import Tool
from agentops.planners.prompting import (
    SDK_RETRIES,
    SYSTEM_PROMPT,
    PlannerError,
    goal_message,
    planner_budget,
    step_failed,
    step_input,
    tool_descriptions,
    tool_use_id,
)
from journal.protocols import Call, Decision, Finish, TaskFacts


def anthropic_client() -> anthropic.Anthropic:
    """A client from settings. Asking the model has no side effect, so the SDK may retry."""
    return anthropic.Anthropic(
        api_key=settings.ANTHROPIC_API_KEY or None,
        base_url=settings.ANTHROPIC_BASE_URL or None,
        timeout=settings.PLANNER_TIMEOUT_SECONDS,
        max_retries=SDK_RETRIES,
    )


def anthropic_messages(facts: TaskFacts) -> list[MessageParam]:
    """The conversation so far, from the facts alone."""
    messages: list[MessageParam] = [{"role": "user", "content": goal_message(facts)}]
    for step in facts.steps:
        use: ToolUseBlockParam = {
            "type": "tool_use",
            "id": tool_use_id(step.key),
            "name": step.tool,
            "input": step_input(step),
        }
        result: ToolResultBlockParam = {
            "type": "tool_result",
            "tool_use_id": tool_use_id(step.key),
            "content": step.result_text(),
        }
        if step_failed(step):
            result["is_error"] = True
        messages.append({"role": "assistant", "content": [use]})
        messages.append({"role": "user", "content": [result]})
    return messages


class AnthropicPlanner:
    """Implements ``journal.protocols.Planner`` with a Claude model."""

    @property
    def max_duration(self) -> timedelta:
        return planner_budget()

    def __init__(
        self, tools: Mapping[str, Tool], *, client: anthropic.Anthropic | None = None
    ) -> None:
        self.tools = tools
        self.client = client if client is not None else anthropic_client()
        self.model: str = settings.ANTHROPIC_MODEL
        self.max_tokens: int = settings.PLANNER_MAX_TOKENS

    def tool_params(self) -> list[ToolParam]:
        return [
            {"name": name, "description": description, "input_schema": schema}
            for name, description, schema in tool_descriptions(self.tools)
        ]

    def decide(self, facts: TaskFacts) -> Decision:
        try:
            response = self.client.messages.create(
                model=self.model,
                max_tokens=self.max_tokens,
                system=SYSTEM_PROMPT,
                messages=anthropic_messages(facts),
                tools=self.tool_params(),
                tool_choice={"type": "auto", "disable_parallel_tool_use": True},
            )
        except (anthropic.AnthropicError, ValueError) as exc:  # ValueError: a body that is not JSON
            raise PlannerError(f"the Anthropic API could not be asked: {exc}") from exc
        return decision_from_message(response)


def decision_from_message(response: object) -> Decision:
    """The decision in a Messages API response (raw kept for audit)."""
    if not isinstance(response, Message):
        raise PlannerError(f"the Anthropic API answered with no message: {response!r:.300}")
    try:
        raw: dict[str, Any] = response.to_dict(mode="json")
        content = list(response.content)
        stop_reason = response.stop_reason
    except (AttributeError, TypeError, ValueError) as exc:
        raise PlannerError(f"malformed Anthropic response: {exc}") from exc
    if stop_reason == "max_tokens":
        raise PlannerError("the model's answer was cut off at max_tokens; not a decision")
    if stop_reason == "refusal":
        raise PlannerError("the model refused to answer; not a decision")
    for block in content:
        if isinstance(block, ToolUseBlock):
            name = getattr(block, "name", None)
            if not isinstance(name, str) or not name:
                raise PlannerError(f"malformed Anthropic tool_use block: {raw!r:.300}")
            args = getattr(block, "input", None)
            # Not an object: recorded as given, and so rejected by the journal, visibly.
            return Call(
                tool=name,
                args=args if isinstance(args, dict) else {"_unparseable": args},
                raw=raw,
            )
    text = "\n".join(
        b.text for b in content if isinstance(b, TextBlock) and isinstance(b.text, str)
    ).strip()
    if not text:
        raise PlannerError(f"the model answered with neither a tool call nor text: {raw!r:.300}")
    return Finish(summary=text, raw=raw)
