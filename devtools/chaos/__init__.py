"""The chaos run (``manage.py chaos``, README "Proof: the chaos run") and its fault injection.

This module is what a worker imports: a worker that kills itself. The run itself lives in
the submodules: ``plan`` (the seeded tasks and faults), ``world`` (the processes it starts
and breaks), ``naive`` (the harness it is compared with), ``audit`` (the journal against
the providers' ledgers) and ``run`` (the service the command calls).

With ``AGENTOPS_CHAOS_KILL=<point>:<tool>`` set, the first call of ``<tool>`` in this
process ends the process with SIGKILL — no cleanup, no lease release, exactly as a crash:
``before_call`` (the step is recorded and its attempt started; nothing was sent),
``during_call`` (the request is on its way; the process dies 0.1 s into the call), or
``after_call`` (the provider answered; the outcome is not yet recorded). Unset, tools are
returned untouched.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Mapping
from typing import Any

from django.conf import settings

from journal.outcomes import Observation, Outcome

POINTS = ("before_call", "during_call", "after_call")


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class Dying:
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


def chaos_tools(tools: dict[str, Any]) -> dict[str, Any]:
    if not settings.CHAOS_KILL:
        return tools
    point, _, name = settings.CHAOS_KILL.partition(":")
    if point not in POINTS or name not in tools:
        raise ValueError(
            f"AGENTOPS_CHAOS_KILL={settings.CHAOS_KILL!r}: <{'|'.join(POINTS)}>:<tool>"
        )
    return {**tools, name: Dying(tools[name], point)}
