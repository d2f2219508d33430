"""The provider audit: list each provider's effects in a window, match them to the journal by
key (agentops/audit/matching.py), store each finding once, and put it in front of a person —
on its task, when it has one (docs/operating/audit.md).

When it runs:

- by hand: ``manage.py audit_providers --since 48h``;
- daily (``AUDIT_INTERVAL_SECONDS``), through RQ's scheduler: each provider's next audit is
  due at ``ProviderWatch.next_audit_at`` (PostgreSQL, the truth), and a job is scheduled for
  then (``enqueue_at``; Redis only rings the doorbell). The job claims the due audit in one
  UPDATE, so a duplicate job does nothing, and schedules the next before it lists. The
  sweeper rings for an audit overdue by ``AUDIT_GRACE`` (the scheduled job was lost: an
  emptied Redis);
- after a provider restarts: the sweeper asks each provider that can say who answers
  (``Audit.boot``: an address and a run id; the sandboxes report one) every
  ``AUDIT_RESTART_CHECK_SECONDS``; a new run at the same address may have lost what the old
  one had, and an audit of it is rung at once. A new address is a new provider: noted, not
  audited.

A provider that cannot be listed is an error on its run (shown on the page, logged), never a
list of everything "missing".
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.db.models.functions import Now
from django.utils import timezone

from agentops.audit.matching import Found, StepSide, match
from agentops.audit.models import AuditRun, AuditTrigger, Finding, FindingKind, ProviderWatch
from agentops.doorbell import run_queue
from agentops.effects import Audit, ProviderEffect, audits, kinds
from agentops.kinds import followup_start
from agentops.workers import AUDIT_JOB
from journal.calls import call
from journal.entries import task_note
from journal.models import Step, StepUndo, Task
from journal.outcomes import StepState
from journal.selectors import task_facts

log = logging.getLogger("agentops.audit")

# The provider's clock and ours may differ: each list reaches this far past the window.
CLOCK_SKEW = timedelta(minutes=5)
# A scheduled audit not started this long after it was due was lost: the sweeper rings.
AUDIT_GRACE = timedelta(minutes=5)
AUDIT_JOB_TIMEOUT_SECONDS = 3600
RANG_KEY = "agentops:audit:rang:{}"
ACTOR = "audit"
KEYS_PER_QUERY = 1000


class FindingRefused(Exception):
    """A finding cannot be resolved so (already resolved, or no reason given): nothing was
    written. ``str()`` is the sentence for the person."""


class UnknownProvider(ValueError):
    pass


@dataclass(frozen=True)
class RunReport:
    provider: str
    run_id: int
    listed: int
    found: int
    """Findings new in this run."""
    seen: int
    """Findings this run made, new or already stored."""
    error: str = ""


# --- One audit ---------------------------------------------------------------------------------


def _sides(steps: Iterable[Step]) -> list[StepSide]:
    return [
        StepSide(
            id=s.pk,
            task_id=s.task_id,
            key=s.key,
            tool=s.tool,
            state=s.state,
            args=s.args,
            evidence=s.evidence,
            undone=s.offset_by_id is not None,
            undoing=bool(s.undoing),  # type: ignore[attr-defined]
            created_at=s.created_at,
            settled_at=s.settled_at,
        )
        for s in steps
    ]


def _with_undoing(steps: Any) -> Any:
    # A standing undo of the step (pending, unknown or done) holds its claim: one index read.
    undo = StepUndo.objects.filter(offsets_id=OuterRef("pk"))
    return steps.annotate(undoing=Exists(undo)).defer("decision")


def _steps_by_key(keys: Sequence[str]) -> dict[str, StepSide]:
    found: dict[str, StepSide] = {}
    for start in range(0, len(keys), KEYS_PER_QUERY):
        chunk = keys[start : start + KEYS_PER_QUERY]
        found.update((s.key, s) for s in _sides(_with_undoing(Step.objects.filter(key__in=chunk))))
    return found


def _window_done(audit: Audit, since: datetime, until: datetime) -> list[StepSide]:
    if not audit.tools:
        return []
    steps = Step.objects.filter(
        tool__in=audit.tools, state=StepState.DONE, created_at__gte=since, created_at__lte=until
    )
    return _sides(_with_undoing(steps))


def _audit_get(provider: str) -> Audit:
    declared = audits()
    if provider not in declared:
        known = ", ".join(sorted(declared)) or "none"
        raise UnknownProvider(f"no audit is declared for provider {provider!r} (known: {known})")
    return declared[provider]


def audit_run(
    *, provider: str, since: datetime, until: datetime, trigger: AuditTrigger | str
) -> RunReport:
    """Audit one provider over ``[since, until]``: list its effects, match them to the
    journal, store what is new and flag the tasks it names. Returns what it listed and found,
    or why it could not list."""
    audit = _audit_get(provider)
    run = AuditRun.objects.create(provider=provider, trigger=trigger, since=since, until=until)
    try:
        listed: list[ProviderEffect] = list(audit.effects(since - CLOCK_SKEW, until + CLOCK_SKEW))
    except Exception as exc:  # the provider could not be asked: nothing is judged missing
        error = f"{type(exc).__name__}: {exc}"[:2000]
        AuditRun.objects.filter(pk=run.pk).update(finished_at=Now(), error=error)
        log.warning(
            "audit of %s could not list: %s",
            provider,
            error,
            extra={"provider": provider, "run": run.pk, "error": error},
        )
        return RunReport(provider, run.pk, 0, 0, 0, error)
    steps = _steps_by_key(sorted({e.key for e in listed}))
    findings = match(
        provider=provider,
        effects=listed,
        steps=steps,
        window_done=_window_done(audit, since, until),
        expected=lambda step: audit.expected(step.tool, step.args, step.evidence),
        until=until,
        list_lag=audit.list_lag,
    )
    new = sum(1 for found in findings if finding_record(provider=provider, run=run, found=found))
    AuditRun.objects.filter(pk=run.pk).update(finished_at=Now(), listed=len(listed), found=new)
    ProviderWatch.objects.get_or_create(provider=provider)
    ProviderWatch.objects.filter(provider=provider).update(audited_at=Now())
    log.info(
        "audit of %s: %s effect(s) listed, %s finding(s), %s new",
        provider,
        len(listed),
        len(findings),
        new,
        extra={"provider": provider, "run": run.pk, "listed": len(listed), "found": new},
    )
    return RunReport(provider, run.pk, len(listed), new, len(findings))


def audits_run(
    *,
    since: datetime,
    until: datetime,
    trigger: AuditTrigger | str,
    providers: Sequence[str] = (),
) -> list[RunReport]:
    """Audit each provider named (every declared one by default), one after the other."""
    names = list(providers) or sorted(audits())
    for name in names:
        _audit_get(name)  # an unknown name is refused before anything is listed
    return [audit_run(provider=n, since=since, until=until, trigger=trigger) for n in names]


def finding_record(*, provider: str, run: AuditRun, found: Found) -> bool:
    """Store ``found`` unless it is stored already (its natural key), and, when it is new and
    about a step, journal it on the step and hand the task to a person (unless one already
    has it). Returns whether it was new."""
    step = found.step
    with transaction.atomic():
        finding, created = Finding.objects.get_or_create(
            provider=provider,
            kind=found.kind,
            effect_id=found.effect_id,
            key=found.key,
            defaults={
                "run": run,
                "task_id": step.task_id if step is not None else None,
                "step_id": step.id if step is not None else None,
                "summary": found.summary,
                "provider_side": found.provider_side(),
                "journal_side": step.shown() if step is not None else {},
                "differences": found.differences,
            },
        )
        if not created or step is None:
            return created
        # Recorded on the task, which goes to a person unless one has it already (their
        # reason is kept; the finding is on its page).
        call(
            "journal_step_audited",
            step=step.id,
            summary=found.summary,
            actor=ACTOR,
            data={
                "finding": finding.pk,
                "finding_kind": str(found.kind),
                "provider": provider,
                "effect": found.effect_id,
            },
        )
    log.warning(
        "audit finding: %s",
        found.summary,
        extra={
            "provider": provider,
            "finding": finding.pk,
            "kind": str(found.kind),
            "task_id": str(step.task_id),
            "step_key": step.key,
        },
    )
    return True


# --- A person resolves a finding ---------------------------------------------------------------


def finding_resolve(*, finding_id: int, actor: str, reason: str) -> Finding:
    """Close a finding, saying why (what was done about it at the provider, or why nothing
    needs to be). Who, when and why are kept on it and, when it is about a task, journaled on
    the task. The task itself is left as it is: a person resumes it on its page. An effect
    undone at the provider is told to whom its kind says, once (``Kind.on_undone_elsewhere``:
    the customer, of a refund made in the dashboard)."""
    why = reason.strip()[:2000]
    if not why:
        raise FindingRefused("say why: every resolved finding keeps its reason")
    if not actor:
        raise FindingRefused("say who resolves it")
    with transaction.atomic():
        finding = Finding.objects.select_for_update().get(pk=finding_id)
        if finding.resolved_at is not None:
            raise FindingRefused(
                f"it was resolved by {finding.resolved_by} at "
                f"{finding.resolved_at:%Y-%m-%d %H:%M} UTC: {finding.resolution}"
            )
        Finding.objects.filter(pk=finding_id).update(
            resolved_at=Now(), resolved_by=actor, resolution=why
        )
        if finding.task_id is not None:
            task_note(
                task_id=finding.task_id,
                step_id=finding.step_id,
                actor=actor,
                action="resolve audit finding",
                data={"reason": why, "finding": finding.pk, "finding_kind": finding.kind},
            )
        _undone_elsewhere_told(finding, actor=actor)
    finding.refresh_from_db()
    return finding


def _effect_of(finding: Finding) -> ProviderEffect:
    """The provider's effect as the finding stored it (``Found.provider_side``)."""
    side = finding.provider_side if isinstance(finding.provider_side, dict) else {}
    raw = side.get("raw")
    return ProviderEffect(
        provider_id=str(side.get("provider_id") or finding.effect_id),
        key=str(side.get("key") or finding.key),
        tool=str(side.get("tool") or ""),
        amount=side.get("amount") if isinstance(side.get("amount"), int) else None,
        currency=side.get("currency") if isinstance(side.get("currency"), str) else None,
        recipient=side.get("recipient") if isinstance(side.get("recipient"), str) else None,
        offset=str(side.get("offset") or ""),
        undone_by=tuple(str(u) for u in side.get("undone_by") or () if u),
        raw=raw if isinstance(raw, dict) else {},
    )


def _undone_elsewhere_told(finding: Finding, *, actor: str) -> Task | None:
    """A person resolved a finding that an effect of a task was undone at the provider (a
    refund made in its dashboard): the task's kind may have someone told of it (its
    ``on_undone_elsewhere``: the customer, of the refund), by a task started now, in the
    resolution's transaction, and once for its references (keyed by the refund's id).

    Not when the audit finds it: the audit runs as the worker role, which starts no task
    (journal/callers.py, docs/design.md §4); the person who resolves the finding does, and
    has seen the refund is the provider's word."""
    if finding.kind != FindingKind.OFFSET_UNKNOWN or finding.task_id is None:
        return None
    task = Task.objects.get(pk=finding.task_id)
    kind = kinds().get(task.kind)
    hook = kind.on_undone_elsewhere if kind is not None else None
    follow = (
        hook(dict(task.refs or {}), task_facts(task=task), _effect_of(finding)) if hook else None
    )
    return followup_start(follow, actor=actor) if follow is not None else None


# --- When audits run: the schedule, and a provider's restart -----------------------------------


def audit_ring(*, provider: str, trigger: AuditTrigger | str, at: datetime | None = None) -> None:
    """Enqueue an audit of ``provider``, now or at ``at`` (RQ's scheduler). Losing it loses
    nothing: the sweeper rings for an overdue one."""
    queue = run_queue()
    options: dict[str, Any] = {
        "job_timeout": AUDIT_JOB_TIMEOUT_SECONDS,
        "result_ttl": 0,  # the run is in PostgreSQL (AuditRun)
        "failure_ttl": 7 * 24 * 3600,
        "description": f"audit {provider} ({trigger})",
    }
    if at is None:
        queue.enqueue(AUDIT_JOB, str(trigger), provider, **options)
    else:
        queue.enqueue_at(at, AUDIT_JOB, str(trigger), provider, **options)


def _window() -> tuple[datetime, datetime]:
    until = timezone.now()
    return until - timedelta(seconds=settings.AUDIT_WINDOW_SECONDS), until


def audit_due(*, provider: str, trigger: str) -> str:
    """What the audit job does: a restart's audit runs at once; a scheduled one only if it is
    due (claimed in one UPDATE, so a duplicate job does nothing), after scheduling the next.
    Returns what happened, for the job's result."""
    if trigger == AuditTrigger.SCHEDULE:
        interval = float(settings.AUDIT_INTERVAL_SECONDS)
        if interval <= 0:
            return "scheduled audits are off (AUDIT_INTERVAL_SECONDS=0)"
        claimed = ProviderWatch.objects.filter(
            provider=provider, next_audit_at__lte=Now() + timedelta(seconds=1)
        ).update(next_audit_at=Now() + timedelta(seconds=interval))
        if not claimed:
            return "not due"
        nxt = ProviderWatch.objects.values_list("next_audit_at", flat=True).get(provider=provider)
        # The next one is scheduled before this one lists: a run that dies loses no schedule.
        audit_ring(provider=provider, trigger=AuditTrigger.SCHEDULE, at=nxt)
    elif trigger != AuditTrigger.RESTART:
        raise ValueError(f"unknown audit trigger {trigger!r}")
    since, until = _window()
    report = audit_run(provider=provider, since=since, until=until, trigger=trigger)
    return report.error or f"listed {report.listed}, {report.found} new finding(s)"


def audits_sweep() -> int:
    """What the sweeper does for the audit, every sweep: each declared provider's daily audit
    scheduled (and rung again when its job was lost), and, every AUDIT_RESTART_CHECK_SECONDS,
    each provider asked who answers now (a restart rings an audit). Returns the audits rung."""
    interval = float(settings.AUDIT_INTERVAL_SECONDS)
    every = float(settings.AUDIT_RESTART_CHECK_SECONDS)
    if interval <= 0 and every <= 0:
        return 0
    rung = 0
    for provider, audit in audits().items():
        watch, _ = ProviderWatch.objects.get_or_create(provider=provider)
        if interval > 0:
            rung += _schedule_kept(watch, interval)
        if every > 0:
            rung += _restart_noticed(audit, watch, every)
    return rung


def _schedule_kept(watch: ProviderWatch, interval: float) -> int:
    """Schedule the provider's next audit if none is (or it is further off than the interval
    now says); ring for it now if it is overdue and nobody rang lately."""
    provider, period = watch.provider, timedelta(seconds=interval)
    moved = ProviderWatch.objects.filter(
        Q(next_audit_at__isnull=True) | Q(next_audit_at__gt=Now() + period), pk=watch.pk
    ).update(next_audit_at=Now() + period)
    if moved:
        nxt = ProviderWatch.objects.values_list("next_audit_at", flat=True).get(pk=watch.pk)
        audit_ring(provider=provider, trigger=AuditTrigger.SCHEDULE, at=nxt)
        return 0
    overdue = ProviderWatch.objects.filter(
        pk=watch.pk, next_audit_at__lte=Now() - AUDIT_GRACE
    ).exists()
    if not overdue:
        return 0
    redis = run_queue().connection
    if not redis.set(
        RANG_KEY.format(provider), "1", nx=True, px=int(AUDIT_GRACE.total_seconds() * 1000)
    ):
        return 0
    log.warning(
        "the scheduled audit of %s is overdue: ringing for it",
        provider,
        extra={"provider": provider},
    )
    audit_ring(provider=provider, trigger=AuditTrigger.SCHEDULE)
    return 1


def _restart_noticed(audit: Audit, watch: ProviderWatch, every: float) -> int:
    """Ask the provider who answers (at most every ``every`` seconds, whichever sweeper asks);
    a new run at the address seen before is a restart: its audit is rung."""
    claimed = ProviderWatch.objects.filter(
        Q(checked_at__isnull=True) | Q(checked_at__lte=Now() - timedelta(seconds=every)),
        pk=watch.pk,
    ).update(checked_at=Now())
    if not claimed:
        return 0
    try:
        seen = audit.boot()
    except Exception as exc:  # it cannot tell now: nothing is concluded
        log.info("%s could not say who answers: %s", watch.provider, exc)
        return 0
    if seen is None:
        return 0
    address, boot = (str(part)[:500] for part in seen)
    if address != watch.address or not watch.boot:
        # First sight of it, or of it at this address: noted, nothing to compare with.
        ProviderWatch.objects.filter(pk=watch.pk).update(address=address, boot=boot[:200])
        return 0
    if boot == watch.boot:
        return 0
    if not ProviderWatch.objects.filter(pk=watch.pk, boot=watch.boot).update(boot=boot[:200]):
        return 0  # another sweeper noticed it first
    log.warning(
        "%s restarted (run %s, was %s): auditing it",
        watch.provider,
        boot,
        watch.boot,
        extra={"provider": watch.provider, "boot": boot, "was": watch.boot},
    )
    audit_ring(provider=watch.provider, trigger=AuditTrigger.RESTART)
    return 1
