"""The Content-Security-Policy of the app's own pages (operators' and customers').

Scripts, styles and images come from this site only: no inline script, no inline style, no
eval (htmx runs with ``allowEval`` off), no framing. A page that needs more is a page to
fix, not a policy to loosen. Django's admin and django-rq's pages are the framework's and
keep their own ways.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "object-src 'none'",
    ]
)
FRAMEWORK_PAGES = ("/admin/", "/django-rq/")


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not request.path.startswith(FRAMEWORK_PAGES):
            response.setdefault("Content-Security-Policy", POLICY)
        return response
