from __future__ import annotations

from django.urls import URLPattern, path

from agentops.operators import findings, views

app_name = "operators"

urlpatterns: list[URLPattern] = [
    path("", views.task_list, name="tasks"),
    path("tasks/new", views.task_new, name="new"),
    path("tasks/reconcile", views.tasks_reconcile, name="reconcile"),
    path("tasks/<uuid:task_id>", views.task_detail, name="task"),
    # Before the actions: "hold" and "notes" are not actions (a claim is no lock).
    path("tasks/<uuid:task_id>/hold", views.task_hold, name="hold"),
    path("tasks/<uuid:task_id>/notes", views.task_note_view, name="note"),
    path("tasks/<uuid:task_id>/steps/<int:n>/<slug:action>", views.task_action, name="step-action"),
    path("tasks/<uuid:task_id>/<slug:action>", views.task_action, name="action"),
    # The provider audit's findings (agentops/audit).
    path("audit/", findings.finding_list, name="audit"),
    path("audit/<int:finding_id>", findings.finding_detail, name="finding"),
    path("audit/<int:finding_id>/resolve", findings.finding_resolve_view, name="finding-resolve"),
]
