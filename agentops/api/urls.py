"""``/api/v1/``: the API's endpoints, its OpenAPI schema (``openapi.json``) and its docs page
(``docs``). None of them takes a login: the endpoints take a client's token instead (and
the session that a login makes is never read), and the schema and its docs page say only
what the code says, with no data in them."""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.urls import URLPattern, URLResolver

from agentops.api.views import api


def _open(patterns: list[URLPattern | URLResolver]) -> list[URLPattern | URLResolver]:
    """The same patterns, each exempt from the login every page needs
    (``LoginRequiredMiddleware``)."""
    for pattern in patterns:
        if isinstance(pattern, URLPattern):
            login_not_required(pattern.callback)
        else:
            _open(pattern.url_patterns)
    return patterns


patterns, _, _ = api.urls
app_name = "api"
urlpatterns = _open(patterns)
