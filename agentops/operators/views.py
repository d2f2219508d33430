"""The operators' pages. Thin: parse the request, check the permission, call one service,
render. Every page works without JavaScript; with htmx, polls and actions swap only the
parts that changed (one partial per swap target)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib.auth.decorators import permission_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect, HttpResponseStopPolling, reswap, retarget

from agentops.effects import ActionRefused, registry
from agentops.http import HtmxHttpRequest
from agentops.kinds import TaskRefused, kind_get, kinds
from agentops.operators import selectors
from agentops.operators.forms import (
    ApproveForm,
    ReasonForm,
    RejectForm,
    ResolveForm,
    StartTaskForm,
    as_json,
    problems_by_field,
)
from agentops.runner import (
    step_resolve,
    steps_reconcile_now,
    task_approve,
    task_cancel,
    task_compensate,
    task_reject,
    task_resume,
    task_start,
)
from journal.models import Step, Task, TaskStatus
from journal.outcomes import LIVE_STATES
from journal.status import FINAL, TransitionRefused

# Looking at tasks (customers' addresses, arguments, payment links) needs its own permission,
# as every action does: a login alone is not enough.
VIEW = "journal.view_task"


def _actor(request: HtmxHttpRequest) -> str:
    return str(request.user.get_username())


def _list_query(request: HtmxHttpRequest) -> dict[str, str]:
    source = request.POST if request.method == "POST" else request.GET
    return {k: source.get(k, "") for k in ("state", "q", "page") if source.get(k)}


# --- The list ----------------------------------------------------------------------------------


@require_GET
@permission_required(VIEW, raise_exception=True)
def task_list(request: HtmxHttpRequest) -> HttpResponse:
    return _render_list(request, _list_query(request))


def _render_list(request: HtmxHttpRequest, query: dict[str, str]) -> HttpResponse:
    data = selectors.task_list(
        state=query.get("state", ""), q=query.get("q", ""), page=query.get("page", 1)
    )
    context = {
        "data": data,
        "labels": selectors.labels(),
        "query": urlencode(query),
        "query_dict": query,
    }
    if request.htmx:
        if request.GET.get("fp") == data.fingerprint:
            return HttpResponse(status=204)
        response = render(request, "operators/task_list.html#list", context)
        return _stop_polling(response) if not data.in_flight else response
    return render(request, "operators/task_list.html", context)


def _stop_polling(response: HttpResponse) -> HttpResponse:
    stopped = HttpResponseStopPolling(response.content)
    stopped["Content-Type"] = response["Content-Type"]
    return stopped


@require_POST
@permission_required("journal.reconcile_step", raise_exception=True)
def tasks_reconcile(request: HtmxHttpRequest) -> HttpResponse:
    """Bulk *Reconcile now*: the selected tasks' unknown steps, or every matching one."""
    query = _list_query(request)
    if not request.htmx and request.POST.get("confirmed") != "1":
        # Without JavaScript the browser asked nobody: confirm on a page of its own.
        return render(
            request,
            "operators/bulk_confirm.html",
            {
                "posted": request.POST,
                "selected": len(request.POST.getlist("task")),
                "query": urlencode(query),
            },
        )
    if request.POST.get("all") == "matching":
        tasks = selectors.tasks_matching(state=query.get("state", ""), q=query.get("q", ""))
    else:
        ids = []
        for raw in request.POST.getlist("task"):
            try:
                ids.append(uuid.UUID(raw))
            except ValueError:
                continue
        tasks = Task.objects.filter(pk__in=ids)
    steps = selectors.unknown_steps_of(tasks=tasks)
    steps_reconcile_now(step_ids=steps, actor=_actor(request), reason="bulk reconcile now")
    if request.htmx:
        return _render_list(request, query)
    return HttpResponseRedirect(f"{reverse('operators:tasks')}?{urlencode(query)}")


# --- One task ----------------------------------------------------------------------------------


@require_GET
@permission_required(VIEW, raise_exception=True)
def task_detail(request: HtmxHttpRequest, task_id: uuid.UUID) -> HttpResponse:
    page = _task_page(task_id)
    context = _task_context(request, page)
    if request.htmx:
        if request.GET.get("fp") == page.fingerprint:
            return HttpResponse(status=204)
        response = render(request, "operators/task_detail.html#task-body", context)
        return response if page.live else _stop_polling(response)
    return render(request, "operators/task_detail.html", context)


def _task_page(task_id: uuid.UUID) -> selectors.TaskPage:
    try:
        return selectors.task_page(task_id=task_id)
    except Task.DoesNotExist:
        raise Http404("no such task") from None


def _task_context(request: HtmxHttpRequest, page: selectors.TaskPage) -> dict[str, Any]:
    task = page.task
    links = [(link.label, link.url(task)) for link in registry.links]
    return {
        "page": page,
        "task": task,
        "actions": {row.step.n: step_actions(request, page, row.step) for row in page.rows},
        "task_actions": task_actions(request, page),
        "labels": {name: spec.label for name, spec in _actions().items()},
        "refs_json": as_json(task.refs),
        "links": [(label, request.build_absolute_uri(url)) for label, url in links if url],
        "back": _safe_next(request) or reverse("operators:tasks"),
    }


def step_actions(request: HtmxHttpRequest, page: selectors.TaskPage, step: Step) -> list[str]:
    """The actions this user may take on this step now, where they are safe."""
    user, task = request.user, page.task
    found = []
    open_step = step.state in LIVE_STATES
    if (
        open_step
        and task.status not in (*FINAL, TaskStatus.AWAITING_APPROVAL)
        and not (step.state == "pending" and page.running_now)
        and user.has_perm("journal.reconcile_step")
    ):
        found.append("reconcile")
    if (
        open_step
        and task.status == TaskStatus.NEEDS_HUMAN
        and user.has_perm("journal.resolve_step")
    ):
        found.append("resolve")
    return found


def task_actions(request: HtmxHttpRequest, page: selectors.TaskPage) -> list[str]:
    user, task = request.user, page.task
    found = []
    if page.held is not None and user.has_perm("journal.decide_approval"):
        found += ["approve", "reject"]
    if task.plan and task.status not in FINAL and user.has_perm("journal.compensate_saga"):
        found.append("compensate")
    if task.status == TaskStatus.NEEDS_HUMAN and user.has_perm("journal.resume_task"):
        found += ["resume", "cancel"]
    # What the installed apps add (a payment's retry): each its own permission and test.
    for name, added in registry.actions.items():
        if user.has_perm(added.permission) and added.available(task):
            found.append(name)
    return found


@dataclass(frozen=True)
class Action:
    permission: str
    label: str
    question: str
    form: Callable[..., forms.Form]
    step: bool = False


def _reason(required: bool) -> Callable[..., forms.Form]:
    return lambda *a, **k: ReasonForm(*a, reason_required=required, **k)


ACTIONS: dict[str, Action] = {
    "reconcile": Action(
        "journal.reconcile_step",
        "Reconcile now",
        "Look this step up at its provider now, by its key? It is sent again, with the same "
        "key, only while the provider still remembers the key.",
        _reason(False),
        step=True,
    ),
    "resolve": Action(
        "journal.resolve_step",
        "Resolve manually",
        "Settle this step by hand, from what you found at the provider?",
        ResolveForm,
        step=True,
    ),
    "approve": Action(
        "journal.decide_approval",
        "Approve",
        "Approve exactly this step? The saga goes on with it.",
        ApproveForm,
    ),
    "reject": Action(
        "journal.decide_approval",
        "Reject",
        "Reject this step? It never runs, and the saga undoes what it did.",
        RejectForm,
    ),
    "compensate": Action(
        "journal.compensate_saga",
        "Compensate",
        "Undo everything this saga did that can be undone, newest first? Nothing goes forward.",
        _reason(True),
    ),
    "resume": Action(
        "journal.resume_task",
        "Resume",
        "Let this task go on from where it is?",
        _reason(True),
    ),
    "cancel": Action(
        "journal.resume_task",
        "Cancel",
        "Stop this task for good?",
        _reason(True),
    ),
}


def _actions() -> dict[str, Action]:
    """Ours, and those the installed apps add (always with a reason)."""
    added = {
        name: Action(a.permission, a.label, a.question, _reason(True))
        for name, a in registry.actions.items()
        if name not in ACTIONS
    }
    return {**ACTIONS, **added}


@require_http_methods(["GET", "POST"])
@permission_required(VIEW, raise_exception=True)
def task_action(
    request: HtmxHttpRequest, task_id: uuid.UUID, action: str, n: int | None = None
) -> HttpResponse:
    spec = _actions().get(action)
    if spec is None or spec.step != (n is not None):
        raise Http404("no such action")
    if not request.user.has_perm(spec.permission):
        raise PermissionDenied
    page = _task_page(task_id)
    step = next((r.step for r in page.rows if r.step.n == n), None) if n is not None else None
    if n is not None and step is None:
        raise Http404("no such step")
    offered = step_actions(request, page, step) if step is not None else task_actions(request, page)
    initial = {}
    if page.held is not None:
        initial = {"approval": page.held.pk, "digest": page.held.digest}
    form = spec.form(request.POST if request.method == "POST" else None, initial=initial)
    error = "" if action in offered else f"“{spec.label}” is not safe for this task now."
    if request.method == "POST" and not error and form.is_valid():
        try:
            started = _perform(action, request, page, step, form.cleaned_data)
        except TransitionRefused as exc:
            error = str(exc)
        else:
            if started is not None:
                return _to_task(request, started)
            return _after_action(request, page, step)
    context = {
        **_task_context(request, page),
        "spec": spec,
        "action": action,
        "form": form,
        "error": error,
        "step": step,
    }
    if request.htmx:
        response = render(request, "operators/confirm.html#confirm", context)
        if request.method == "POST":
            # A refusal goes back into the confirmation, not over the row it was about.
            retarget(response, f"#confirm-{step.n}" if step is not None else "#task-confirm")
            reswap(response, "innerHTML")
        return response
    status = 409 if error and request.method == "POST" else 200
    return render(request, "operators/confirm.html", context, status=status)


def _perform(
    action: str,
    request: HtmxHttpRequest,
    page: selectors.TaskPage,
    step: Step | None,
    data: dict[str, Any],
) -> Task | None:
    """Do the action; a task it started is returned, for the operator to be taken to."""
    actor, task_id = _actor(request), page.task.pk
    reason = str(data.get("reason") or "")
    if action == "reconcile" and step is not None:
        steps_reconcile_now(step_ids=[step.pk], actor=actor, reason=reason)
    elif action == "resolve" and step is not None:
        step_resolve(
            step_id=step.pk,
            actor=actor,
            done=data["outcome"] == "done",
            evidence=str(data.get("evidence") or ""),
            reason=reason,
        )
    elif action == "approve":
        if not task_approve(
            task_id=task_id, approval_id=data["approval"], digest=data["digest"], actor=actor
        ):
            raise TransitionRefused(
                "the request for approval had expired: the saga decides again and asks anew"
            )
    elif action == "reject":
        task_reject(task_id=task_id, approval_id=data["approval"], actor=actor, reason=reason)
    elif action == "compensate":
        task_compensate(task_id=task_id, actor=actor, reason=reason)
    elif action == "resume":
        task_resume(task_id=task_id, actor=actor, reason=reason)
    elif action == "cancel":
        task_cancel(task_id=task_id, actor=actor, reason=reason)
    elif action in registry.actions:
        try:
            started: Task | None = registry.actions[action].perform(
                task=page.task, actor=actor, reason=reason
            )
        except ActionRefused as exc:
            raise TransitionRefused(str(exc)) from exc
        return started
    return None


def _to_task(request: HtmxHttpRequest, task: Task) -> HttpResponse:
    """To the page of a task the action started (htmx: a full navigation, not a swap)."""
    url = reverse("operators:task", args=[task.pk])
    return HttpResponseClientRedirect(url) if request.htmx else HttpResponseRedirect(url)


def _after_action(
    request: HtmxHttpRequest, page: selectors.TaskPage, step: Step | None
) -> HttpResponse:
    if request.htmx:
        fresh = _task_page(page.task.pk)
        context = _task_context(request, fresh)
        if step is not None:
            # The row it acted on, and the task's head (its status and counters) out of band.
            row = next(r for r in fresh.rows if r.step.n == step.n)
            return render(
                request, "operators/task_detail.html#row-and-head", {**context, "row": row}
            )
        return render(request, "operators/task_detail.html#task-body", context)
    return HttpResponseRedirect(
        _safe_next(request) or reverse("operators:task", args=[page.task.pk])
    )


def _safe_next(request: HtmxHttpRequest) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return ""


# --- Starting a task -----------------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
@permission_required("journal.start_task", raise_exception=True)
def task_new(request: HtmxHttpRequest) -> HttpResponse:
    name = request.GET.get("kind") or request.POST.get("kind") or ""
    if name not in kinds():
        return render(request, "operators/task_new.html", {"kinds": kinds().values(), "form": None})
    kind = kind_get(name)
    form = StartTaskForm(request.POST if request.method == "POST" else None, kind=kind)
    if request.method == "POST" and form.is_valid():
        try:
            task = task_start(
                kind=kind.name,
                goal=form.cleaned_data["goal"],
                refs=form.refs(),
                actor=_actor(request),
                plan=form.plan(),
            )
        except TaskRefused as refused:
            problems_by_field(form, refused.problems)
        else:
            return HttpResponseRedirect(reverse("operators:task", args=[task.pk]))
    return render(
        request,
        "operators/task_new.html",
        {"kinds": kinds().values(), "kind": kind, "form": form},
        status=400 if request.method == "POST" else 200,
    )
