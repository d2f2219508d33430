"""One way to write a date on the customer's pages, in the reader's locale (issue 38).

The page is in English; what differs between its readers is the order: "December 3, 2026"
for American English (and a browser that says only ``en``, or nothing: ``LANGUAGE_CODE`` is
``en-us``), "3 December 2026" for every other reader. The server writes the order it chose
on each ``<time>`` (``data-order``) with the time in UTC, and the page's script rewrites it
in the reader's own zone in the same order and words (static/customers/pay.js): the two never
mix on one page."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

Order = Literal["mdy", "dmy"]

# English as written month first (CLDR's long date for these regions).
MONTH_FIRST = frozenset({"en", "en-us", "en-ca", "en-ph", "en-as", "en-gu", "en-mp", "en-pr"})
MONTH_FIRST |= {"en-um", "en-vi", "*"}


def reader_order(accept_language: str) -> Order:
    """The date order of the reader's first language (``Accept-Language``, by its weights):
    month first for American English or none said, day first otherwise."""
    tags: list[tuple[float, int, str]] = []
    for i, item in enumerate(accept_language.split(",")):
        tag, _, params = item.strip().partition(";")
        weight = 1.0
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name == "q":
                try:
                    weight = float(value)
                except ValueError:
                    weight = 0.0
        if tag and weight > 0:
            tags.append((-weight, i, tag.strip().lower().replace("_", "-")))
    if not tags:
        return "mdy"
    first = min(tags)[2]
    return "mdy" if first in MONTH_FIRST else "dmy"


def date_text(at: datetime, *, order: Order, with_time: bool = True) -> str:
    """``at`` in UTC as the customer's pages write it: "December 3, 2026, 14:05 UTC" or
    "3 December 2026, 14:05 UTC" (without ``with_time``, the date alone)."""
    utc = at.astimezone(UTC)
    month = utc.strftime("%B")
    day = f"{month} {utc.day}, {utc.year}" if order == "mdy" else f"{utc.day} {month} {utc.year}"
    return f"{day}, {utc:%H:%M} UTC" if with_time else day
