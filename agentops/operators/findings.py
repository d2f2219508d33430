"""The provider audit's pages: the findings, filtered (open by default), each with what the
provider shows and what the journal says, and resolving one with a reason. Thin, like the
task pages: parse, check the permission, call one service, render."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.decorators import permission_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from agentops.audit import selectors
from agentops.audit.models import Finding
from agentops.audit.services import FindingRefused, finding_resolve
from agentops.http import BadQuery, HtmxHttpRequest, bad_query, query_params
from agentops.operators.forms import ReasonForm

# Findings show customers' payments, addresses and amounts: their own permission to look, and
# another to resolve (agentops/audit/migrations/0002: the operators' groups have them).
VIEW = "agentops_audit.view_finding"
RESOLVE = "agentops_audit.resolve_finding"
FILTERS = ("state", "kind", "provider", "q", "page")


@require_GET
@permission_required(VIEW, raise_exception=True)
def finding_list(request: HtmxHttpRequest) -> HttpResponse:
    try:
        query = query_params(request.GET, FILTERS)
    except BadQuery as exc:
        return bad_query(exc)
    data = selectors.finding_list(
        state=query.get("state", "open"),
        kind=query.get("kind", ""),
        provider=query.get("provider", ""),
        q=query.get("q", ""),
        page=query.get("page", 1),
    )
    context = {
        "data": data,
        "kinds": selectors.kinds(),
        "states": list(selectors.STATES),
        "query_dict": query,
        "query": urlencode(query),
    }
    return render(request, "operators/audit_list.html", context)


def _finding(finding_id: int) -> Finding:
    try:
        return selectors.finding_get(finding_id=finding_id)
    except Finding.DoesNotExist:
        raise Http404("no such finding") from None


def _render(
    request: HtmxHttpRequest,
    finding: Finding,
    form: ReasonForm,
    error: str = "",
    status: int = 200,
) -> HttpResponse:
    context = {
        "finding": finding,
        "form": form,
        "error": error,
        "can_resolve": finding.is_open and request.user.has_perm(RESOLVE),
    }
    template = "operators/audit_finding.html"
    if request.htmx:
        template += "#finding"
    return render(request, template, context, status=status)


@require_GET
@permission_required(VIEW, raise_exception=True)
def finding_detail(request: HtmxHttpRequest, finding_id: int) -> HttpResponse:
    finding = _finding(finding_id)
    return _render(request, finding, ReasonForm(reason_required=True))


@require_POST
@permission_required(VIEW, raise_exception=True)
def finding_resolve_view(request: HtmxHttpRequest, finding_id: int) -> HttpResponse:
    if not request.user.has_perm(RESOLVE):
        raise PermissionDenied
    finding = _finding(finding_id)
    form = ReasonForm(request.POST, reason_required=True)
    if not form.is_valid():
        return _render(request, finding, form, status=400)
    try:
        resolved = finding_resolve(
            finding_id=finding.pk,
            actor=str(request.user.get_username()),
            reason=form.cleaned_data["reason"],
        )
    except FindingRefused as exc:
        return _render(request, _finding(finding_id), form, error=str(exc), status=409)
    if request.htmx:
        return _render(request, _finding(resolved.pk), ReasonForm(reason_required=True))
    return HttpResponseRedirect(reverse("operators:finding", args=[resolved.pk]))
