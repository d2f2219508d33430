"""The operators' pages. Thin: parse the request, check the permission, call one service,
render. Every page works without JavaScript; with htmx, polls and actions swap only the
parts that changed (one partial per swap target)."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect, HttpResponseStopPolling, reswap, retarget

from agentops.effects import registry, task_start
from agentops.http import HtmxHttpRequest, has_control
from agentops.kinds import TaskRefused, kind_get, kinds
from agentops.models import NOTE_MAX
from agentops.operators import actions, claims, selectors
from agentops.operators.forms import ListForm, ReasonForm, StartTaskForm, as_json, problems_by_field
from agentops.operators.queue import queue_now
from agentops.operators.services import steps_reconcile_now
from journal.models import Step, Task
from journal.operator import undoable
from journal.status import TransitionRefused

# Looking at tasks (customers' addresses, arguments, payment links) needs its own permission,
# as every action does: a login alone is not enough.
VIEW = "journal.view_task"
CLAIM = "agentops.claim_task"
NOTE = "agentops.note_task"
LIST_KEYS = ("state", "q", "kind", "attention", "since", "until", "sort", "page")


def _actor(request: HtmxHttpRequest) -> str:
    return str(request.user.get_username())


def _list_params(request: HtmxHttpRequest) -> dict[str, str]:
    """The list's query as the URL keeps it (only what was asked, only known keys)."""
    source = request.POST if request.method == "POST" else request.GET
    return {k: source.get(k, "") for k in LIST_KEYS if source.get(k)}


def _list_query(params: dict[str, str]) -> selectors.ListQuery:
    form = ListForm(
        params,
        states=selectors.labels(),
        kinds={k: k for k in kinds()},
        codes=selectors.attention_labels(),
        sorts=selectors.SORTS,
    )
    return selectors.ListQuery(**form.query())


# --- The list ----------------------------------------------------------------------------------


@require_GET
@permission_required(VIEW, raise_exception=True)
def task_list(request: HtmxHttpRequest) -> HttpResponse:
    return _render_list(request, _list_params(request))


def _render_list(
    request: HtmxHttpRequest, params: dict[str, str], result: str = ""
) -> HttpResponse:
    query = _list_query(params)
    data = selectors.task_list(query=query, page=params.get("page", 1))
    queue = queue_now()
    fingerprint = selectors.fingerprint(data.fingerprint, queue.parts)
    kept = {k: v for k, v in params.items() if k != "page"}
    unsorted = urlencode({k: v for k, v in kept.items() if k != "sort"})
    context = {
        "data": data,
        "queue": queue,
        "fingerprint": fingerprint,
        "labels": selectors.labels(),
        "kinds": sorted(kinds()),
        "codes": selectors.attention_labels(),
        "sorts": selectors.SORTS,
        "query": urlencode(params),
        "kept": urlencode(kept),
        "sort_base": f"{unsorted}&" if unsorted else "",
        # An order the list does not know is left out, and said so (never an error).
        "sort_ignored": ""
        if params.get("sort", "") in selectors.SORTS
        else "".join(c for c in params["sort"][:40] if c.isprintable()) or "?",
        "query_dict": params,
        "result": result,
        "page_links": list(
            data.page.paginator.get_elided_page_range(data.page.number, on_each_side=2, on_ends=1)
        ),
    }
    if request.htmx and not result:
        if request.GET.get("fp") == fingerprint:
            return HttpResponse(status=204)
        response = render(request, "operators/task_list.html#list", context)
        return _stop_polling(response) if not data.in_flight else response
    if request.htmx:
        return render(request, "operators/task_list.html#list", context)
    return render(request, "operators/task_list.html", context)


def _stop_polling(response: HttpResponse) -> HttpResponse:
    stopped = HttpResponseStopPolling(response.content)
    stopped["Content-Type"] = response["Content-Type"]
    return stopped


@require_POST
@permission_required("journal.reconcile_step", raise_exception=True)
def tasks_reconcile(request: HtmxHttpRequest) -> HttpResponse:
    """Bulk *Reconcile now*: the selected tasks' unknown steps, or every matching one. Asked
    in the page (the confirmation, with a reason, swapped in; a page of its own without
    JavaScript), then done, and the result said."""
    params = _list_params(request)
    everything = request.POST.get("all") == "matching"
    ids = []
    for raw in request.POST.getlist("task"):
        try:
            ids.append(uuid.UUID(raw))
        except ValueError:
            continue
    form = ReasonForm(request.POST if request.POST.get("confirmed") == "1" else None)
    if request.POST.get("confirmed") != "1" or not form.is_valid():
        context = {
            "posted": request.POST,
            "selected": len(ids),
            "everything": everything,
            "query": urlencode(params),
            "form": form,
        }
        if request.htmx:
            return render(request, "operators/bulk_confirm.html#bulk-confirm", context)
        return render(request, "operators/bulk_confirm.html", context)
    if everything:
        tasks = selectors.tasks_matching(query=_list_query(params))
    else:
        tasks = Task.objects.filter(pk__in=ids)
    steps = selectors.unknown_steps_of(tasks=tasks)
    reason = form.cleaned_data["reason"] or "bulk reconcile now"
    steps_reconcile_now(step_ids=steps, actor=_actor(request), reason=reason)
    touched = len(set(Step.objects.filter(pk__in=steps).values_list("task_id", flat=True)))
    result = (
        f"Reconcile now: {len(steps)} unknown step{'s' if len(steps) != 1 else ''} of "
        f"{touched} task{'s' if touched != 1 else ''} to be looked up now, recorded with your "
        f"name and reason ({reason})."
        if steps
        else "Reconcile now: no unknown step among those tasks; nothing was done."
    )
    if request.htmx:
        return _render_list(request, params, result=result)
    messages.success(request, result)
    return HttpResponseRedirect(f"{reverse('operators:tasks')}?{urlencode(params)}")


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
    offers = actions.task_offers(request, page)
    return {
        "page": page,
        "task": task,
        "step_offers": {row.step.n: actions.step_offers(request, page, row) for row in page.rows},
        "held_offers": [o for o in offers if o.name in ("approve", "reject", "compensate")],
        # What the held step's callout offers is not offered twice.
        "task_offers": [
            o
            for o in offers
            if o.name not in ("approve", "reject")
            and not (page.held is not None and o.name == "compensate")
        ],
        "links": [(label, request.build_absolute_uri(url)) for label, url in links if url],
        "back": _safe_next(request) or reverse("operators:tasks"),
        # Who holds it, when the one looking is someone else: warned before acting.
        "held_by_other": page.hold if page.hold and page.hold.holder != _actor(request) else None,
        "held_ago": page.hold.ago(timezone.now()) if page.hold else "",
    }


@require_http_methods(["GET", "POST"])
@permission_required(VIEW, raise_exception=True)
def task_action(
    request: HtmxHttpRequest, task_id: uuid.UUID, action: str, n: int | None = None
) -> HttpResponse:
    spec = actions.actions().get(action)
    if spec is None or spec.step != (n is not None):
        raise Http404("no such action")
    if not request.user.has_perm(spec.permission):
        raise PermissionDenied
    page = _task_page(task_id)
    row = next((r for r in page.rows if r.step.n == n), None) if n is not None else None
    if n is not None and row is None:
        raise Http404("no such step")
    step = row.step if row is not None else None
    offered = (
        actions.step_offers(request, page, row)
        if row is not None
        else actions.task_offers(request, page)
    )
    offer = next((o for o in offered if o.name == action), None)
    initial: dict[str, Any] = {}
    if page.held is not None:
        initial = {"approval": page.held.pk, "digest": page.held.digest}
    if action == "correct" and row is not None and row.reported is not None:
        initial["evidence"] = as_json(row.reported)
    form = spec.form(request.POST if request.method == "POST" else None, initial=initial)
    not_safe = f"“{spec.label}” is not safe for this task now."
    error = not_safe if offer is None else offer.why_not
    if request.method == "POST" and not error and form.is_valid():
        try:
            started = actions.perform(
                action, actor=_actor(request), page=page, step=step, data=form.cleaned_data
            )
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
        "row": row,
        "undoes": undoable(page.steps) if action == "compensate" else [],
    }
    if request.htmx:
        response = render(request, "operators/confirm.html#confirm", context)
        if request.method == "POST":
            # A refusal goes back into the confirmation, not over the row it was about.
            slot = "#held-confirm" if action in ("approve", "reject") else "#task-confirm"
            retarget(response, f"#confirm-{step.n}" if step is not None else slot)
            reswap(response, "innerHTML")
        return response
    status = 409 if error and request.method == "POST" else 200
    return render(request, "operators/confirm.html", context, status=status)


def _to_task(request: HtmxHttpRequest, task: Task) -> HttpResponse:
    """To the page of a task the action started (htmx: a full navigation, not a swap)."""
    url = reverse("operators:task", args=[task.pk])
    return HttpResponseClientRedirect(url) if request.htmx else HttpResponseRedirect(url)


def _after_action(
    request: HtmxHttpRequest, page: selectors.TaskPage, step: Step | None
) -> HttpResponse:
    if request.htmx:
        # The whole task: an action on one step changes the task's banner, its history and
        # what else is offered as well.
        fresh = _task_page(page.task.pk)
        return render(
            request, "operators/task_detail.html#task-body", _task_context(request, fresh)
        )
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


# --- Who holds a task, and its notes (agentops/operators/claims.py) ----------------------------


@require_POST
@permission_required([VIEW, CLAIM], raise_exception=True)
def task_hold(request: HtmxHttpRequest, task_id: uuid.UUID) -> HttpResponse:
    """Claim, release or take over the task (``do``); a take-over names the holder seen
    (``holder``). Refused with a sentence, on the task's page."""
    page = _task_page(task_id)
    do = request.POST.get("do", "")
    actor = _actor(request)
    try:
        if do == "claim":
            claims.task_claim(task_id=page.task.pk, actor=actor)
            done = "You hold this task now. Your colleagues see it, and are warned before acting."
        elif do == "release":
            claims.task_release(task_id=page.task.pk, actor=actor)
            done = "You released this task: nobody holds it now."
        elif do == "take_over":
            holder = request.POST.get("holder", "")
            claims.task_take_over(task_id=page.task.pk, actor=actor, holder=holder)
            done = f"You took this task over from {holder}: you hold it now."
        else:
            return HttpResponse(
                "do is one of claim, release, take_over\n",
                status=400,
                content_type="text/plain; charset=utf-8",
            )
    except claims.CoordinationRefused as refused:
        messages.error(request, f"Not done: {refused}.")
    else:
        messages.success(request, done)
    return HttpResponseRedirect(reverse("operators:task", args=[page.task.pk]))


@require_POST
@permission_required([VIEW, NOTE], raise_exception=True)
def task_note_view(request: HtmxHttpRequest, task_id: uuid.UUID) -> HttpResponse:
    """Leave a note on the task; a note refused is shown again with the sentence why."""
    page = _task_page(task_id)
    text = request.POST.get("text", "")
    try:
        claims.task_note(task_id=page.task.pk, actor=_actor(request), text=text)
    except claims.CoordinationRefused as refused:
        # Shown again to be mended, without the control characters it was refused for.
        shown = "".join(c for c in text[: NOTE_MAX * 2] if not has_control(c, allowed="\n\r\t"))
        context = {**_task_context(request, page), "note_text": shown, "note_error": str(refused)}
        return render(request, "operators/task_detail.html", context, status=400)
    messages.success(request, "Your note is kept, with your name and the time.")
    return HttpResponseRedirect(reverse("operators:task", args=[page.task.pk]) + "#notes")


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
