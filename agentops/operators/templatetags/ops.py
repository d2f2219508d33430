"""Small filters for the operators' pages."""

from __future__ import annotations

import json
from typing import Any

from django import template

from agentops.kinds import references_of

register = template.Library()


@register.filter
def as_json(value: Any) -> str:
    """A value as JSON on one line (the page wraps it), escaped by the template like any
    text. Not indented: indenting takes json's pure-Python encoder, and a 200-step page
    encodes six hundred values."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


@register.filter
def seconds(value: float | None) -> str:
    """``4 h 12 min``, ``37 s``: a duration as a person reads it."""
    if value is None:
        return ""
    s = int(value)
    if s >= 86400:
        return f"{s // 86400} d {s % 86400 // 3600} h"
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60} min"
    if s >= 60:
        return f"{s // 60} min {s % 60} s"
    return f"{s} s"


@register.filter
def slug(value: str) -> str:
    """A badge's text as a CSS class: ``not done`` → ``not-done``."""
    return str(value).replace(" ", "-").replace("_", "-")


@register.filter
def get(mapping: dict[Any, Any], key: Any) -> Any:
    return mapping.get(key)


@register.filter
def reference(task: Any) -> str:
    """What a task is about, as its kind declares (``INV-2291``; ``INV-1 +2`` for a batch)."""
    found = references_of(task.kind, task.refs if isinstance(task.refs, dict) else {})
    if not found:
        return ""
    return found[0] + (f" +{len(found) - 1}" if len(found) > 1 else "")
