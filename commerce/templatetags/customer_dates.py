"""``{% customer_time at "date" %}``: every date on the customer's pages, one way
(commerce/customers/dates.py), in the order of the reader's locale."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.utils.html import format_html

from commerce.customers.dates import date_text, reader_order

register = template.Library()


@register.simple_tag(takes_context=True)
def customer_time(context: Any, at: datetime | None, style: str = "datetime") -> str:
    """A ``<time>`` the page's script rewrites in the reader's zone (UTC without it)."""
    if at is None:
        return ""
    request = context.get("request")
    order = reader_order(request.headers.get("Accept-Language", "") if request else "")
    return format_html(
        '<time datetime="{}" data-local="{}" data-order="{}" title="{}">{}</time>',
        at.isoformat(),
        "date" if style == "date" else "datetime",
        order,
        date_text(at, order=order),
        date_text(at, order=order, with_time=style != "date"),
    )
