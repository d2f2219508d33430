"""The pages the shipped kinds serve: Stripe's webhook (registered at ``webhooks/``)."""

from __future__ import annotations

from django.urls import URLPattern, path

from commerce import views

urlpatterns: list[URLPattern] = [
    path("stripe", views.stripe_webhook, name="stripe-webhook"),
]
