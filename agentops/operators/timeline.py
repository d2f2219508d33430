"""A step's timeline as shapes for inline SVG: the picture of the six-second charge.

Pure: entries in, shapes out. Time runs left to right from the step's first entry to its
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

    @property
    def caption(self) -> str:
        return f"+{self.at_s:.1f} s {self.title}"


@dataclass(frozen=True)
class Timeline:
    shapes: list[Shape] = field(default_factory=list)
    span_s: float = 0.0
    width: int = WIDTH
    height: int = HEIGHT

    @property
    def captions(self) -> list[str]:
        """What happened, in the order it happened (the shapes are drawn by kind)."""
        return [s.caption for s in sorted(self.shapes, key=lambda s: s.at_s)]

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

    def events_html(self) -> SafeString:
        """The captions as list items, escaped."""
        return mark_safe("".join(f"<li>{escape(c)}</li>" for c in self.captions))  # noqa: S308


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


def step_timeline(events: Sequence[Event]) -> Timeline:
    """The shapes of one step's entries (in the order they were written)."""
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
    return Timeline(shapes=shapes, span_s=round(span, 3))
