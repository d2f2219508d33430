"""The request as htmx-aware views see it (django-htmx's middleware adds ``htmx``), and its
query parameters as the pages' views read them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


class BadQuery(ValueError):
    """A query parameter no page can use; ``str()`` is the sentence the answer (400) says."""


def query_params(source: Mapping[str, str], keys: Iterable[str]) -> dict[str, str]:
    """The values of ``keys`` that were given (not empty), as the URL has them. A value with a
    control character (NUL above all: PostgreSQL refuses it in text, so a query with it would
    fail) is refused, naming the parameter (:class:`BadQuery`), before any query is made."""
    found = {}
    for key in keys:
        value = source.get(key) or ""
        if not value:
            continue
        if has_control(value):
            raise BadQuery(
                f"the parameter {key} holds a control character (such as NUL), which nothing "
                "here is named with: remove it and ask again"
            )
        found[key] = value
    return found


def has_control(value: str, *, allowed: str = "") -> bool:
    """Whether ``value`` holds a control character (C0 or DEL) other than those ``allowed``
    (a note's line breaks)."""
    return any((ord(c) < 32 or ord(c) == 127) and c not in allowed for c in value)


def bad_query(exc: BadQuery) -> HttpResponse:
    """400, saying why, in a sentence."""
    return HttpResponseBadRequest(f"{exc}\n", content_type="text/plain; charset=utf-8")
