"""Values as people read them on the operators' pages: money in major units with its currency
(the minor units beside it), instants as times (local to the viewer once ops.js has run, UTC
before and on hover, and how long ago or how soon), and JSON pretty, collapsible, copyable,
with those two readings beside the numbers they explain.

Pure and escaped: text from outside (a provider's evidence, a model's arguments) is only
ever text here, and no name of any app's domain is: which names tell most about an effect
is what the installed apps' tools and kinds declare. Built in Python rather than in
templates, as the timeline is: a 200-step page renders six hundred values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import lru_cache
from html import escape
from typing import Any

from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe

from agentops.effects import kinds, registry, tools
from agentops.money import money_text

# Epoch seconds a provider may send for an instant (a hold's expiry): 2001-09-09 to 2286.
EPOCH_RANGE = (1e9, 1e10)
INSTANT_KEYS = ("_at", "expires", "until", "created", "deadline")
MONEY_KEYS = ("amount", "amount_total", "amount_refunded", "amount_received", "cap")


def money(amount: Any, currency: Any) -> str:
    """``4,200.00 USD``; "" when the two are not an amount and a currency code."""
    if not isinstance(amount, int) or isinstance(amount, bool):
        return ""
    if not isinstance(currency, str) or len(currency) != 3 or not currency.isalpha():
        return ""
    return money_text(amount, currency)


def money_of(values: Any) -> str:
    """The amount a mapping (arguments, evidence, refs) names, as people read it."""
    if not isinstance(values, Mapping):
        return ""
    return money(values.get("amount"), values.get("currency"))


def as_instant(value: Any) -> datetime | None:
    """An instant from what the journal or a provider holds: a datetime, ISO text, or epoch
    seconds within a plausible range."""
    if isinstance(value, datetime):
        return value if timezone.is_aware(value) else value.replace(tzinfo=UTC)
    if isinstance(value, int | float) and not isinstance(value, bool):
        if EPOCH_RANGE[0] <= value <= EPOCH_RANGE[1]:
            return datetime.fromtimestamp(value, tz=UTC)
        return None
    if isinstance(value, str) and len(value) >= 19 and value[4:5] == "-" and value[10:11] == "T":
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if timezone.is_aware(parsed) else parsed.replace(tzinfo=UTC)
    return None


def relative(at: datetime, now: datetime | None = None) -> str:
    """``in 3 min``, ``2 h ago``, ``just now``: how far ``at`` is from now."""
    now = now or timezone.now()
    seconds = (at - now).total_seconds()
    size = abs(seconds)
    if size < 10:
        return "just now"
    if size < 60:
        span = f"{int(size)} s"
    elif size < 3600:
        span = f"{int(size // 60)} min"
    elif size < 86400:
        span = f"{int(size // 3600)} h"
    elif size < 86400 * 60:
        span = f"{int(size // 86400)} d"
    else:
        span = f"{int(size // (86400 * 30))} months"
    return f"in {span}" if seconds > 0 else f"{span} ago"


def when_html(value: Any, *, now: datetime | None = None, precise: bool = True) -> SafeString:
    """An instant for people: ``<time>`` with the UTC time as its text and title (ops.js
    writes it in the viewer's zone) and how long ago or how soon beside it."""
    at = as_instant(value)
    if at is None:
        return mark_safe("")  # noqa: S308 - nothing
    utc = at.astimezone(UTC)
    shown = utc.strftime("%Y-%m-%d %H:%M:%S" if precise else "%Y-%m-%d %H:%M")
    iso = utc.isoformat(timespec="seconds").replace("+00:00", "Z")
    return mark_safe(  # noqa: S308 - generated numbers only
        f'<time datetime="{iso}" title="{shown} UTC" data-when'
        f"{' data-precise' if precise else ''}>{shown} UTC</time> "
        f'<span class="rel" data-rel="{iso}">({relative(at, now)})</span>'
    )


def duration(seconds: float) -> str:
    """``4 h 12 min``: a span as people read it."""
    s = int(seconds)
    if s >= 86400:
        return f"{s // 86400} d {s % 86400 // 3600} h"
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60} min"
    if s >= 60:
        return f"{s // 60} min {s % 60} s"
    return f"{s} s"


# --- JSON, pretty and annotated --------------------------------------------------------------


def json_html(value: Any, *, label: str = "", open_: bool = False) -> SafeString:
    """``value`` as pretty JSON in a ``<details>`` (collapsible), with a button that copies
    the JSON itself, and the money and instants in it read out beside their numbers."""
    raw = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str, indent=2)
    summary = escape(label) if label else "JSON"
    reading = preview(value)
    if reading:
        summary += f' <span class="reading">{escape(reading)}</span>'
    body = _pretty(value, 0, now=timezone.now())
    return mark_safe(  # noqa: S308 - every text escaped above and in _pretty
        f'<details class="json"{" open" if open_ else ""}><summary>{summary}</summary>'
        f'<button type="button" class="copy" data-copy="{escape(raw)}" hidden>Copy</button>'
        f'<pre class="json-body">{body}</pre></details>'
    )


# The names any effect may be known by, after those its tool declares.
GENERIC_TELLING = ("id", "reference")


def telling() -> tuple[str, ...]:
    """The names that say most about an effect, in the order a person looks for them: what
    the installed tools declare proves their effects and finds them (their evidence, then
    the ids people search by), an id and a reference, then where the kinds keep their
    business references (an order, a ticket)."""
    return _telling(tuple(registry.tools), tuple(registry.kinds))


@lru_cache(maxsize=4)
def _telling(tool_names: tuple[str, ...], kind_names: tuple[str, ...]) -> tuple[str, ...]:
    try:
        declared = [n for tool in tools().values() for n in tool.searchable]
    except Exception:  # a tool that cannot be made: the start-up checks say so (E116)
        declared = []
    references = [path.split(".")[-1] for kind in kinds().values() for path in kind.references]
    return tuple(dict.fromkeys([*declared, *GENERIC_TELLING, *references]))


def preview(value: Any) -> str:
    """A collapsed JSON's one line: its amount as people read it, else its most telling
    identifiers (``payment_intent pi_1 · charge ch_1``)."""
    if not isinstance(value, Mapping):
        return ""
    shown = money_of(value)
    names = [n for n in telling() if _scalar(value.get(n))]
    names += [n for n in sorted(value, key=str) if n not in names and _scalar(value.get(n))]
    parts = [f"{n} {value[n]}" for n in names if n not in ("amount", "currency")][:2]
    text = " · ".join(([shown] if shown else []) + parts)
    return text if len(text) <= 90 else text[:89] + "…"


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool) and value != ""


def _pretty(value: Any, depth: int, *, now: datetime, key: str = "", sibling: Any = None) -> str:
    pad, inner = "  " * depth, "  " * (depth + 1)
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        items = []
        for k in sorted(value, key=str):
            v = value[k]
            rendered = _pretty(v, depth + 1, now=now, key=str(k), sibling=value)
            items.append(f'{inner}<span class="k">{escape(json.dumps(str(k)))}</span>: {rendered}')
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, list | tuple):
        if not value:
            return "[]"
        items = [f"{inner}{_pretty(v, depth + 1, now=now)}" for v in value]
        return "[\n" + ",\n".join(items) + f"\n{pad}]"
    text = escape(json.dumps(value, ensure_ascii=False, default=str))
    css = "s" if isinstance(value, str) else "n" if isinstance(value, int | float) else "b"
    note = _note(key, value, sibling, now)
    return f'<span class="{css}">{text}</span>{note}'


def _note(key: str, value: Any, sibling: Any, now: datetime) -> str:
    """What a number means, beside it: money, or an instant."""
    lowered = key.lower()
    if lowered in MONEY_KEYS and isinstance(sibling, Mapping):
        shown = money(value, sibling.get("currency"))
        if shown:
            return f' <span class="note">= {escape(shown)}</span>'
    if any(lowered.endswith(k) or lowered == k.strip("_") for k in INSTANT_KEYS):
        at = as_instant(value)
        if at is not None:
            return f' <span class="note">= {when_html(at, now=now)}</span>'
    return ""
