from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from agentops.api.auth import api_client_create, api_client_revoke, name_problem
from agentops.models import ApiClient, ApiScope, WebhookEvent
from journal.admin import ReadOnlyAdmin


@admin.register(WebhookEvent)
class WebhookEventAdmin(ReadOnlyAdmin):
    """Provider notifications as they were stored: read-only, like the journal."""

    list_display = ["id", "provider", "type", "received_at", "result"]
    list_filter = ["provider", "type"]
    search_fields = ["id"]


class ApiClientForm(forms.ModelForm):  # type: ignore[type-arg]
    """A new client: its name and scopes (its token is made on saving, and shown once)."""

    scopes = forms.MultipleChoiceField(
        choices=ApiScope.choices, widget=forms.CheckboxSelectMultiple
    )

    class Meta:
        model = ApiClient
        fields = ["name", "scopes"]

    def clean_name(self) -> str:
        name = str(self.cleaned_data["name"]).strip()
        problem = name_problem(name)
        if problem is not None:
            raise forms.ValidationError(problem)
        return name


@admin.register(ApiClient)
class ApiClientAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Clients of the HTTP API: made here or by ``manage.py api_client``; revoked, never
    deleted (the journal names them). The token is shown once, on the page after adding."""

    list_display = ["name", "prefix", "scopes", "created_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "prefix"]
    readonly_fields = ["name", "prefix", "scopes", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def get_form(
        self, request: HttpRequest, obj: Any | None = None, change: bool = False, **kwargs: Any
    ) -> Any:
        if obj is None:
            kwargs["form"] = ApiClientForm
        return super().get_form(request, obj, change, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.readonly_fields if obj is not None else []

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.readonly_fields if obj is not None else ["name", "scopes"]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: ApiClient, form: Any, change: bool) -> None:
        if change:
            return  # nothing of a client changes but through revoking it
        made, token = api_client_create(name=obj.name, scopes=list(form.cleaned_data["scopes"]))
        obj.pk, obj.prefix, obj.created_at = made.pk, made.prefix, made.created_at
        # Shown by response_add on the next page and kept nowhere: not in a message (which
        # may travel in a cookie), not in the session.
        request._api_token = token  # type: ignore[attr-defined]

    def response_add(
        self, request: HttpRequest, obj: ApiClient, post_url_continue: str | None = None
    ) -> HttpResponse:
        return TemplateResponse(
            request,
            "admin/agentops/apiclient/token.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.model._meta,
                "client": obj,
                "token": request._api_token,  # type: ignore[attr-defined]
                "title": f"Token of {obj.name}",
            },
        )

    @admin.action(description="Revoke the selected clients' tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiClient]) -> None:
        revoked = 0
        for client in queryset.filter(revoked_at__isnull=True):
            api_client_revoke(name=client.name)
            revoked += 1
        self.message_user(request, f"{revoked} client(s) revoked: their tokens now get 401.")
