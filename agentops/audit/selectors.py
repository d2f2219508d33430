"""What the operators' audit page and a task's page read of the provider audit."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from django.core.paginator import Page, Paginator
from django.db.models import CharField, Count, Q, QuerySet
from django.db.models.expressions import RawSQL

from agentops.audit.models import AuditRun, Finding, FindingKind
from agentops.effects import audits

PER_PAGE = 25
STATES: Mapping[str, tuple[str, Q]] = {
    "open": ("open", Q(resolved_at__isnull=True)),
    "resolved": ("resolved", Q(resolved_at__isnull=False)),
    "all": ("all", Q()),
}


@dataclass(frozen=True)
class FindingList:
    page: Page[Finding]
    counts: dict[str, int]
    state: str
    kind: str
    provider: str
    q: str
    providers: list[str]
    runs: list[AuditRun]


def _search(q: str) -> Q:
    q = q.strip()
    if not q:
        return Q()
    found = Q(key=q) | Q(effect_id=q)
    with contextlib.suppress(ValueError):
        task = uuid.UUID(q)
        found |= Q(task_id=task) | Q(key__startswith=_keys_of(task))
    return found


def _keys_of(task: uuid.UUID) -> RawSQL:
    """What every key of the task's steps starts with, by the key format's one function
    (journal/sql/journal_step_key): its key for a step 0, less the 0. A finding that no step
    made (no_step) has no task, only a key: it is found by its task's id this way."""
    return RawSQL(
        "left(journal_step_key(p_task => %s::uuid, p_n => 0), -1)",
        [str(task)],
        output_field=CharField(),
    )


def finding_list(
    *, state: str = "open", kind: str = "", provider: str = "", q: str = "", page: int | str = 1
) -> FindingList:
    """A page of findings, newest first, filtered by state (open by default), kind, provider
    and a key, effect id or task id; with each state's count and each provider's last run."""
    state = state if state in STATES else "open"
    rows: QuerySet[Finding] = Finding.objects.all()
    if kind in FindingKind.values:
        rows = rows.filter(kind=kind)
    if provider:
        rows = rows.filter(provider=provider)
    rows = rows.filter(_search(q))
    counts = rows.aggregate(
        open=Count("pk", filter=STATES["open"][1]),
        resolved=Count("pk", filter=STATES["resolved"][1]),
        all=Count("pk"),
    )
    shown = rows.filter(STATES[state][1]).select_related("task").order_by("-found_at", "-id")
    providers = sorted(audits())
    return FindingList(
        page=Paginator(shown, PER_PAGE).get_page(page),
        counts=counts,
        state=state,
        kind=kind if kind in FindingKind.values else "",
        provider=provider,
        q=q,
        providers=providers,
        runs=runs_last(providers=providers),
    )


def runs_last(*, providers: list[str]) -> list[AuditRun]:
    """Each provider's last audit run (through its (provider, started_at) index)."""
    found = []
    for provider in providers:
        run = AuditRun.objects.filter(provider=provider).order_by("-started_at").first()
        if run is not None:
            found.append(run)
    return found


def finding_get(*, finding_id: int) -> Finding:
    return Finding.objects.select_related("task", "step", "run").get(pk=finding_id)


def findings_of(*, task_id: uuid.UUID) -> list[Finding]:
    """A task's findings, open first, then newest: one query, through the task's index."""
    return list(
        Finding.objects.filter(task_id=task_id).order_by("-resolved_at", "-found_at", "-id")
    )


def kinds() -> Mapping[str, str]:
    return dict(FindingKind.choices)
