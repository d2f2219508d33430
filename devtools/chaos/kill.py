"""The fault the chaos run injects into a worker's tools: a worker that kills itself.

A tool wrapper (``TOOL_WRAPPERS``, agentops.tools.tools_wrapped): the chaos run starts a
worker with the environment :func:`armed` gives, and the runner builds its tools through
:func:`dying`. With ``AGENTOPS_CHAOS_KILL=<point>:<tool>``, the first call of ``<tool>`` in
that process ends the process with SIGKILL — no cleanup, no lease release, exactly as a
crash: ``before_call`` (the step is recorded and its attempt started; nothing was sent),
``during_call`` (the request is on its way; the process dies 0.1 s into the call), or
``after_call`` (the provider answered; the outcome is not yet recorded). Without it, tools
are returned untouched. A production worker never lists it, so never imports this.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Mapping
from typing import Any

from agentops.kinds import tool_registry
from journal.outcomes import Observation, Outcome

POINTS = ("before_call", "during_call", "after_call")
KILL_VARIABLE = "AGENTOPS_CHAOS_KILL"
WRAPPER = "devtools.chaos.kill.dying"


def armed(point_and_tool: str) -> dict[str, str]:
    """The environment of a worker that dies at ``<point>:<tool>`` (checked now)."""
    _parse(point_and_tool)
    return {"AGENTOPS_TOOL_WRAPPERS": WRAPPER, KILL_VARIABLE: point_and_tool}


def _parse(point_and_tool: str) -> tuple[str, str]:
    point, _, name = point_and_tool.partition(":")
    if point not in POINTS or name not in tool_registry():
        raise ValueError(f"{KILL_VARIABLE}={point_and_tool!r}: <{'|'.join(POINTS)}>:<tool>")
    return point, name


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class Dying:
    """`tool`, but the process dies at `point` of its first call."""

    def __init__(self, tool: Any, point: str) -> None:
        self.tool, self.point = tool, point

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tool, name)

    def validate(self, args: Mapping[str, Any]) -> list[str]:
        return list(self.tool.validate(args))

    def call(self, args: Mapping[str, Any], *, key: str) -> Observation:
        if self.point == "before_call":
            _die()
        if self.point == "during_call":
            threading.Timer(0.1, _die).start()
        seen: Observation = self.tool.call(args, key=key)
        if self.point == "after_call":
            _die()
        return seen

    def lookup(self, args: Mapping[str, Any], *, key: str) -> Outcome | None:
        result: Outcome | None = self.tool.lookup(args, key=key)
        return result


def dying(tools: dict[str, Any]) -> dict[str, Any]:
    """The tool wrapper: `tools` with the one ``AGENTOPS_CHAOS_KILL`` names made to kill the
    process, when the task has it (a worker armed for hold_flight runs renewals untouched)."""
    spec = os.environ.get(KILL_VARIABLE, "")
    if not spec:
        return tools
    point, name = _parse(spec)
    if name not in tools:
        return tools
    return {**tools, name: Dying(tools[name], point)}
