"""Planners: what turns the journal's facts about a task into its next decision."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from agentops import conf
from journal.protocols import Planner

# One scripted planner per process: its memory of what it was asked is the point.
_scripted: Planner | None = None


def planner_get(tools: Mapping[str, Any]) -> Planner:
    """The configured planner (settings.PLANNER), offered ``tools``, through each wrapper
    ``PLANNER_WRAPPERS`` names, in order (a dotted path to a callable that takes the planner
    and returns one). None in production; the chaos run's model is one."""
    planner = _planner_get(tools)
    for path in settings.PLANNER_WRAPPERS:
        planner = import_string(path)(planner)
    return planner


def _planner_get(tools: Mapping[str, Any]) -> Planner:
    global _scripted
    name = settings.PLANNER
    if name == "scripted":
        from agentops.planners.scripted import ScriptedPlanner

        _scripted = _scripted or ScriptedPlanner()
        return _scripted
    if name in ("anthropic", "openai"):
        # The SDKs build without a key and fail only when asked: say so now.
        setting = f"{name.upper()}_API_KEY"
        if not (getattr(settings, setting) or conf.raw(setting)):
            raise ValueError(f"PLANNER={name} needs {setting}")
    if name == "anthropic":
        from agentops.planners.anthropic import AnthropicPlanner

        planner: Planner = AnthropicPlanner(tools)
        return planner
    if name == "openai":
        from agentops.planners.openai import OpenAIPlanner

        planner = OpenAIPlanner(tools)
        return planner
    raise ValueError(f"unknown PLANNER {name!r}: scripted, anthropic or openai")
