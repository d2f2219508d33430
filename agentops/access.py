"""Who may see what: operators' pages and login throttling (issue 8).

django-rq's pages show job arguments and tracebacks and can empty queues; django-rq itself
lets in any staff user. Here they need django-rq's own permission, "Access admin page"
(``django_rq.admin``), which superusers have and other staff are given deliberately.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

QUEUES_PERMISSION = "django_rq.admin"

View = Callable[..., HttpResponse]


def queues_permission_required(view: View) -> View:
    """Anonymous users go to the login page; logged-in users without the permission get 403."""

    @wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        user = request.user
        if not user.is_authenticated:
            return redirect_to_login(request.get_full_path(), reverse("admin:login"))
        if not (user.is_active and user.is_staff and user.has_perm(QUEUES_PERMISSION)):
            raise PermissionDenied
        return view(request, *args, **kwargs)

    return guarded


def client_ip(request: HttpRequest) -> str:
    """The address failed logins are counted against (django-axes).

    The peer's address, unless an operator declared a proxy in front (DJANGO_BEHIND_PROXY):
    then the last address in X-Forwarded-For, the one that proxy saw. Earlier entries are
    whatever the client claimed, and would let it pick a fresh address per attempt.
    """
    if settings.BEHIND_PROXY:
        forwarded = str(request.META.get("HTTP_X_FORWARDED_FOR", ""))
        last = forwarded.rsplit(",", 1)[-1].strip()
        if last:
            return last
    return str(request.META.get("REMOTE_ADDR", ""))
