from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from journal.models import Approval, Entry, Step, Task


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """The journal is changed by its services only; the admin shows it."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class StepInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Step
    fields = readonly_fields = ("n", "tool", "state", "detail", "key", "attempts", "next_check_at")
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Task)
class TaskAdmin(ReadOnlyAdmin):
    list_display = ["id", "kind", "status", "step_count", "created_at", "lease_owner"]
    list_filter = ["status", "kind"]
    search_fields = ["id", "goal"]
    inlines = [StepInline]


@admin.register(Step)
class StepAdmin(ReadOnlyAdmin):
    list_display = ["key", "tool", "state", "attempts", "lookups", "next_check_at", "settled_at"]
    list_filter = ["state", "tool"]
    search_fields = ["key", "guard"]


@admin.register(Entry)
class EntryAdmin(ReadOnlyAdmin):
    list_display = ["id", "at", "kind", "actor", "step"]
    list_filter = ["kind"]


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    list_display = ["id", "task", "tool", "state", "decided_by", "requested_at", "expires_at"]
    list_filter = ["state", "tool"]
