from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import URLPattern, URLResolver, include, path
from django_rq.urls import get_admin_urlpatterns, get_api_urlpatterns

from agentops.access import queues_permission_required
from agentops.effects import registry

# django-rq's pages, each behind the queues permission (its own check is only is_staff).
queue_urls: list[URLPattern] = [
    *(
        URLPattern(p.pattern, queues_permission_required(p.callback), p.default_args, p.name)
        for p in get_api_urlpatterns()
    ),
    *get_admin_urlpatterns(view_wrapper=queues_permission_required),
]

urlpatterns: list[URLPattern | URLResolver] = [
    path("", include("agentops.operators.urls")),
    path("api/v1/", include("agentops.api.urls")),
    path(
        "login/",
        auth_views.LoginView.as_view(template_name="operators/login.html"),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("django-rq/", include((queue_urls, "django_rq"))),
    # The pages the installed apps serve (a customer's page, a provider's webhook).
    *(path(prefix, include(urlconf)) for prefix, urlconf in registry.urls),
]

# A 500 that says the database is unavailable (a failover) is a 503 with a sentence.
handler500 = "agentops.unavailable.server_error"
