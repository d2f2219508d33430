from __future__ import annotations

from django.contrib import admin

from agentops.models import WebhookEvent
from journal.admin import ReadOnlyAdmin


@admin.register(WebhookEvent)
class WebhookEventAdmin(ReadOnlyAdmin):
    """Provider notifications as they were stored: read-only, like the journal."""

    list_display = ["id", "provider", "type", "received_at", "result"]
    list_filter = ["provider", "type"]
    search_fields = ["id"]
