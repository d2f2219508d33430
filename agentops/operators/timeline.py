"""A step's timeline as shapes for inline SVG (the picture of the six-second charge), and as
a table people read: when, how long after the step began, what happened, who did it.

Pure: entries in, shapes and rows out. Time runs left to right from the step's first entry to its
last; each attempt is a bar from its start to its end (colored by what it was classified),
lookups are dots (found or not), a webhook is a diamond, settlement a line. Every shape has
a title (the tooltip) saying what happened; nothing here is styled inline (the pages' CSP
allows no inline styles): classes only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from html import escape
from typing import Any

from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT, PAD = 360, 40, 8
BAR_Y, BAR_H, MARK_Y = 12, 10, 17


@dataclass(frozen=True)
class Shape:
    kind: str  # bar | dot | diamond | line
    x: float
    css: str
    title: str
    w: float = 0.0
    points: str = ""
    at_s: float = 0.0  # seconds after the step's first entry


@dataclass(frozen=True)
class Row:
    """One line of a step's timeline table: when, how long after the step's first entry,
    what happened, who did it (a person, a provider, or the harness when empty)."""

    at: datetime
    since_s: float
    what: str
    actor: str = ""
    css: str = ""

    @property
    def since(self) -> str:
        return f"+{self.since_s:.1f} s" if self.since_s < 120 else f"+{self.since_s / 60:.0f} min"


@dataclass(frozen=True)
class Timeline:
    shapes: list[Shape] = field(default_factory=list)
    span_s: float = 0.0
    width: int = WIDTH
    height: int = HEIGHT
    rows: list[Row] = field(default_factory=list)

    @property
    def span_label(self) -> str:
        return f"+{self.span_s:.1f} s" if self.span_s < 120 else f"+{self.span_s / 60:.0f} min"

    def svg(self, *, label: str) -> SafeString:
        """The inline SVG (every text escaped), built here rather than in the template: a
        200-step page draws a thousand shapes, and this is several times faster."""
        parts = [
            f'<svg class="timeline" viewBox="0 0 {self.width} {self.height}" '
            f'width="{self.width}" height="{self.height}" role="img" '
            f'aria-label="{escape(label)}">',
            f'<line x1="{PAD}" y1="30" x2="{WIDTH - PAD}" y2="30" class="axis"></line>',
        ]
        parts += [_shape_svg(shape) for shape in self.shapes]
        parts.append(f'<text x="{PAD}" y="39" class="tick">0 s</text>')
        parts.append(
            f'<text x="{WIDTH - PAD}" y="39" text-anchor="end" class="tick">'
            f"{escape(self.span_label)}</text></svg>"
        )
        return mark_safe("".join(parts))  # noqa: S308 - numbers and escaped text only


def _shape_svg(s: Shape) -> str:
    css, title = escape(s.css), escape(s.title)
    if s.kind == "bar":
        return (
            f'<rect x="{s.x}" y="{BAR_Y}" width="{s.w}" height="{BAR_H}" class="{css}">'
            f"<title>{title}</title></rect>"
        )
    if s.kind == "dot":
        return (
            f'<circle cx="{s.x}" cy="{MARK_Y}" r="4" class="{css}"><title>{title}</title></circle>'
        )
    if s.kind == "diamond":
        return (
            f'<polygon points="{escape(s.points)}" class="{css}"><title>{title}</title></polygon>'
        )
    return f'<line x1="{s.x}" y1="5" x2="{s.x}" y2="30" class="{css}"><title>{title}</title></line>'


@dataclass(frozen=True)
class Event:
    kind: str
    at: datetime
    data: dict[str, Any]
    actor: str = ""


def _attempt_title(start: Event, end: Event | None) -> str:
    n = start.data.get("attempt", "?")
    if end is None:
        return f"attempt {n}: started, no end recorded (the runner stopped)"
    seen = end.data.get("observed", "")
    detail = end.data.get("status") or end.data.get("error_class") or ""
    return f"attempt {n}: {seen} {detail} → {end.data.get('classified', '')}".strip()


def describe(e: Event, *, sent: bool = True) -> tuple[str, str]:
    """What one entry says happened, in a sentence, and its class (for its colour)."""
    d = e.data
    if e.kind == "step_recorded":
        if not sent:
            return "recorded by a person (nothing was sent)", ""
        attempt = " and attempt 1 started" if "attempt" in d else ""
        return f"recorded with its key{attempt}", ""
    if e.kind == "attempt_started":
        return f"attempt {d.get('attempt', '?')} started", ""
    if e.kind == "attempt_ended":
        return _attempt_title(Event(e.kind, e.at, {"attempt": d.get("attempt")}), e), ""
    if e.kind == "lookup":
        found = bool(d.get("found"))
        return f"looked up: {d.get('result') or ('found' if found else 'not found')}", ""
    if e.kind == "webhook_received":
        return f"webhook {d.get('type', '')} ({d.get('event', '')})", ""
    if e.kind == "step_settled":
        state = str(d.get("state", "")).replace("_", " ")
        return f"settled {state} ({d.get('via', 'attempt')}): {d.get('detail', '')}", (
            "settled-" + state.replace(" ", "-")
        )
    if e.kind == "conflict":
        return f"conflicting report, the step kept {d.get('kept', '')}: {d.get('reason', '')}", (
            "conflict"
        )
    if e.kind == "operator_action":
        why = f": {d['reason']}" if d.get("reason") else ""
        return f"{d.get('action', 'acted')}{why}", "decision"
    if e.kind == "effect_checked":
        return f"still stands at the provider? {d.get('stands')}", ""
    if e.kind in ("guard_refused", "decision_refused", "decision_rejected"):
        return f"refused ({d.get('refusal', '')}): {d.get('proof', '')}", "settled-not-done"
    if e.kind == "audit_finding":
        return f"provider audit: {d.get('summary') or d.get('kind', '')}", "conflict"
    return e.kind.replace("_", " "), ""


def step_timeline(events: Sequence[Event], *, sent: bool = True) -> Timeline:
    """The shapes of one step's entries (in the order they were written), and its table.
    ``sent``: whether the step was ever sent (a person's correction was not)."""
    if not events:
        return Timeline()
    t0 = min(e.at for e in events)
    t1 = max(e.at for e in events)
    span = max((t1 - t0).total_seconds(), 0.001)

    def x(at: datetime) -> float:
        return round(PAD + (at - t0).total_seconds() / span * (WIDTH - 2 * PAD), 1)

    def since(at: datetime) -> float:
        return (at - t0).total_seconds()

    shapes: list[Shape] = []
    starts: dict[Any, Event] = {}
    ends: dict[Any, Event] = {}
    for e in events:
        # The first attempt starts with the step's record, and an attempt that settled the
        # step ends in the settlement's entry (one entry per commit, where one says both).
        if not sent:
            continue
        if e.kind == "attempt_started" or (e.kind == "step_recorded" and "attempt" in e.data):
            starts[e.data.get("attempt")] = e
        elif e.kind == "attempt_ended" or (e.kind == "step_settled" and "observed" in e.data):
            ends[e.data.get("attempt")] = e
    for n, start in starts.items():
        end = ends.get(n)
        x0 = x(start.at)
        x1 = x(end.at) if end is not None else x(t1)
        css = f"attempt {end.data.get('classified', 'open') if end else 'open'}"
        shapes.append(
            Shape(
                "bar",
                x0,
                css,
                _attempt_title(start, end),
                w=max(round(x1 - x0, 1), 2.0),
                at_s=since(start.at),
            )
        )
    for e in events:
        if e.kind == "lookup":
            found = bool(e.data.get("found"))
            result = e.data.get("result", "")
            shapes.append(
                Shape(
                    "dot",
                    x(e.at),
                    f"lookup {'found' if found else 'not-found'}",
                    f"lookup: {result or ('found' if found else 'not found')}",
                    at_s=since(e.at),
                )
            )
        elif e.kind == "webhook_received":
            cx = x(e.at)
            points = f"{cx},{MARK_Y - 6} {cx + 6},{MARK_Y} {cx},{MARK_Y + 6} {cx - 6},{MARK_Y}"
            shapes.append(
                Shape(
                    "diamond",
                    cx,
                    "webhook",
                    f"webhook {e.data.get('type', '')}",
                    points=points,
                    at_s=since(e.at),
                )
            )
        elif e.kind == "step_settled":
            state = str(e.data.get("state", ""))
            shapes.append(
                Shape(
                    "line",
                    x(e.at),
                    f"settled {state.replace('_', '-')}",
                    f"settled {state.replace('_', ' ')} ({e.data.get('via', 'attempt')})",
                    at_s=since(e.at),
                )
            )
        elif e.kind == "effect_checked":
            stands = e.data.get("stands")
            shapes.append(
                Shape(
                    "dot",
                    x(e.at),
                    f"lookup {'found' if stands else 'not-found'}",
                    f"still stands? {stands}",
                    at_s=since(e.at),
                )
            )
        elif e.kind in ("guard_refused", "decision_refused", "decision_rejected"):
            shapes.append(
                Shape(
                    "line",
                    x(e.at),
                    "settled not-done",
                    f"refused ({e.data.get('refusal', '')}): nothing was sent",
                    at_s=since(e.at),
                )
            )
    rows = []
    for e in events:
        what, css = describe(e, sent=sent)
        rows.append(Row(e.at, since(e.at), what, e.actor, css))
    return Timeline(shapes=shapes, span_s=round(span, 3), rows=rows)
