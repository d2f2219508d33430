"""The tools of a run: every tool the installed apps declare (``agentops.effects``), made
fresh, and — in the chaos run only — wrapped."""

from __future__ import annotations

from django.conf import settings
from django.utils.module_loading import import_string

from agentops.effects import Tool, tools


def tool_registry() -> dict[str, Tool]:
    """Every declared tool, made fresh, so settings changed since (e.g. in tests) count."""
    return tools()


def tools_wrapped(tools: dict[str, Tool]) -> dict[str, Tool]:
    """`tools` through each wrapper ``TOOL_WRAPPERS`` names, in order: a dotted path to a
    callable that takes the tools by name and returns them, some wrapped. None in
    production; the chaos run arms a worker with one that kills it at a call."""
    for path in settings.TOOL_WRAPPERS:
        tools = import_string(path)(tools)
    return tools
