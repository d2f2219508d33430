from __future__ import annotations

from django.urls import URLPattern, path

from commerce.customers import views

app_name = "customers"

urlpatterns: list[URLPattern] = [
    path("<str:token>/", views.payment, name="payment"),
]
