from __future__ import annotations

from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path

from agentops import views

urlpatterns: list[URLPattern | URLResolver] = [
    path("admin/", admin.site.urls),
    path("django-rq/", include("django_rq.urls")),
    path("webhooks/stripe", views.stripe_webhook, name="stripe-webhook"),
]
