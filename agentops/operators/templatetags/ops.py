"""Small filters for the operators' pages."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django import template
from django.utils import timezone
from django.utils.safestring import SafeString

from agentops.kinds import Ref, UnknownKind, kind_get, references_of
from agentops.operators import readable

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
    return readable.duration(value)


@register.filter
def when(value: Any) -> SafeString:
    """An instant: UTC until ops.js writes it in the viewer's zone, and how far from now."""
    return readable.when_html(value)


@register.filter
def when_short(value: Any) -> SafeString:
    """An instant to the minute."""
    return readable.when_html(value, precise=False)


@register.filter
def after_now(value: timedelta) -> datetime:
    """The instant ``value`` from now (a lockout's end)."""
    return timezone.now() + value


@register.filter
def json_block(value: Any, label: str = "") -> SafeString:
    """Pretty, collapsible, copyable JSON, with its money and instants read out."""
    return readable.json_html(value, label=label)


@register.filter
def json_open(value: Any, label: str = "") -> SafeString:
    """:func:`json_block`, open."""
    return readable.json_html(value, label=label, open_=True)


@register.filter
def money_of(value: Any) -> str:
    """``4,200.00 USD`` for a mapping with an amount and a currency."""
    return readable.money_of(value)


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


@register.filter
def task_amount(task: Any) -> str:
    """What a task moves, from its refs: ``49.00 USD`` (its kind's default currency when the
    refs name none); "" when they name no amount."""
    refs = task.refs if isinstance(task.refs, dict) else {}
    if "amount" not in refs:
        return ""
    return readable.money(refs.get("amount"), refs.get("currency") or _currency(task.kind))


def _currency(kind: str) -> Any:
    """The currency a kind's calls take when its refs name none (a bound default)."""
    try:
        binds = kind_get(kind).binds
    except UnknownKind:
        return None
    for bound in binds.values():
        for bind in bound:
            if isinstance(bind, Ref) and bind.ref == "currency" and isinstance(bind.default, str):
                return bind.default
    return None


@register.filter
def customer(task: Any) -> str:
    """Who a task is for, as its kind declares (``Alan Turing``; ``a@x.com +2``)."""
    try:
        return kind_get(task.kind).customer_of(task.refs if isinstance(task.refs, dict) else {})
    except UnknownKind:
        return ""


@register.filter
def since(end: datetime | None, start: datetime | None) -> str:
    """How long from ``start`` to ``end``: ``4 min 2 s``."""
    if end is None or start is None:
        return ""
    return readable.duration(max((end - start).total_seconds(), 0.0))


@register.filter
def age(start: datetime | None) -> str:
    """How long ago ``start`` was: ``2 h 5 min``."""
    if start is None:
        return ""
    return readable.duration(max((timezone.now() - start).total_seconds(), 0.0))


@register.filter
def finding_summary(finding: Any) -> str:
    """A finding's sentence with its amounts in major units (``refunded 49.00 USD``)."""
    from agentops.operators.audit_pages import summary

    return summary(finding)


@register.filter
def finding_meaning(kind: str) -> tuple[str, str]:
    """What a finding's kind means, and what to do about it."""
    from agentops.operators.audit_pages import MEANING

    return MEANING.get(kind, ("", ""))


@register.filter
def finding_compared(finding: Any) -> list[Any]:
    """The journal's and the provider's sides, field by field."""
    from agentops.operators.audit_pages import compared

    return compared(finding)
