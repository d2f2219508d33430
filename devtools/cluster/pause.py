"""A tool wrapper (``AGENTOPS_TOOL_WRAPPERS``) that holds a worker at the boundary between a
step's commit and its provider call, so that a test can break the world right there.

With ``AGENTOPS_PAUSE_AT=<tool>:<directory>``, the first call of ``<tool>`` in the process
writes ``<directory>/paused`` (the step's key: it is recorded and its attempt started; nothing
was sent) and waits until ``<directory>/go`` exists, then makes the call. A production worker
never lists it, so never imports this.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from journal.outcomes import Observation, Outcome

PAUSE_VARIABLE = "AGENTOPS_PAUSE_AT"
WRAPPER = "devtools.cluster.pause.pausing"
WAIT_SECONDS = 300.0


def armed(tool: str, directory: Path) -> dict[str, str]:
    """The environment of a worker that pauses before its first call of ``tool``."""
    return {"AGENTOPS_TOOL_WRAPPERS": WRAPPER, PAUSE_VARIABLE: f"{tool}:{directory}"}


class Pausing:
    """``tool``, but its first call waits at the boundary until told to go."""

    def __init__(self, tool: Any, directory: Path) -> None:
        self.tool, self.directory, self.paused = tool, directory, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tool, name)

    def validate(self, args: Mapping[str, Any]) -> list[str]:
        return list(self.tool.validate(args))

    def call(self, args: Mapping[str, Any], *, key: str) -> Observation:
        if not self.paused:
            self.paused = True
            (self.directory / "paused").write_text(key)
            deadline = time.monotonic() + WAIT_SECONDS
            while not (self.directory / "go").exists():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"nobody said go within {WAIT_SECONDS:g} s")
                time.sleep(0.02)
        seen: Observation = self.tool.call(args, key=key)
        return seen

    def lookup(self, args: Mapping[str, Any], *, key: str) -> Outcome | None:
        result: Outcome | None = self.tool.lookup(args, key=key)
        return result


_armed: dict[str, Pausing] = {}


def pausing(tools: dict[str, Any]) -> dict[str, Any]:
    """The wrapper: ``tools`` with the one ``AGENTOPS_PAUSE_AT`` names made to pause once per
    process (a tool is built again for every run: the pause is kept across them)."""
    spec = os.environ.get(PAUSE_VARIABLE, "")
    name, _, directory = spec.partition(":")
    if not name or name not in tools:
        return tools
    held = _armed.get(name)
    if held is None:
        held = _armed[name] = Pausing(tools[name], Path(directory))
    else:
        held.tool = tools[name]
    return {**tools, name: held}
