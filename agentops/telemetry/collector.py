"""The gauges, computed from PostgreSQL and Redis when Prometheus scrapes: what is true now,
whichever process answers and however often the processes restarted.

Each query reads only rows that are open (tasks that can advance or need a person, unknown
steps, pending approvals) through an index made for them, never the history, which grows
for ever: finished tasks are counted by ``agentops_runs_total`` instead. The plans are
checked by tests/agentops/test_metrics.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Case, Count, Min, OuterRef, Q, Subquery, When
from django.db.models.functions import Greatest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from rq.job import Job

from journal.models import (
    Approval,
    ApprovalState,
    Attention,
    Entry,
    Step,
    Task,
    TaskStatus,
)
from journal.outcomes import StepState
from journal.selectors import task_list_runnable

log = logging.getLogger(__name__)

# The statuses of tasks that are not over: the only ones counted (the others grow for ever).
OPEN_STATUSES = (
    TaskStatus.RUNNABLE,
    TaskStatus.WAITING,
    TaskStatus.AWAITING_APPROVAL,
    TaskStatus.NEEDS_HUMAN,
)
# "About to expire": a pending approval that a person must decide within this.
EXPIRING_WITHIN = timedelta(hours=1)

Source = Callable[[], Iterable[GaugeMetricFamily]]
# More gauges, computed at scrape time like these: a callable returning metric families,
# registered with :func:`gauge_source`. The provider audit's "findings open" goes here.
SOURCES: list[Source] = []


def gauge_source(source: Source) -> Source:
    """Add ``source``'s gauges to every scrape (a decorator). It runs in the process that
    answers the scrape, should cost one indexed query, and may raise: its failure shows as
    ``agentops_collector_up{source="<its name>"} 0`` and the rest is still served."""
    SOURCES.append(source)
    return source


def _age(now: datetime, then: datetime | None) -> float:
    return 0.0 if then is None else max(0.0, (now - then).total_seconds())


def db_now() -> datetime:
    """The database's clock: every age is measured by the clock that stamped the rows."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        (now,) = cursor.fetchone() or (None,)
    if not isinstance(now, datetime):
        raise TypeError(f"SELECT now() gave {now!r}")
    return now


def task_gauges(now: datetime) -> Iterator[GaugeMetricFamily]:
    tasks = GaugeMetricFamily(
        "agentops_tasks",
        "Tasks that are not over, by status (runnable: running or about to be; waiting: until "
        "a lookup or a retry is due; awaiting_approval; needs_human).",
        labels=["status"],
    )
    needing = GaugeMetricFamily(
        "agentops_tasks_needing_human",
        "Tasks handed to a person, by attention code (why: conflict, key_dead, "
        "rounds_exhausted, misconfigured, ...).",
        labels=["code"],
    )
    by_status = dict.fromkeys(OPEN_STATUSES, 0)
    by_code = dict.fromkeys(Attention.values, 0)
    rows = (
        Task.objects.filter(status__in=OPEN_STATUSES)
        .values_list("status", "attention_code")
        .annotate(n=Count("pk"))
        .order_by()
    )
    for status, code, n in rows:
        by_status[status] = by_status.get(status, 0) + n
        if status == TaskStatus.NEEDS_HUMAN:
            by_code[code] = by_code.get(code, 0) + n
    for status, n in by_status.items():
        tasks.add_metric([str(status)], n)
    for code, n in by_code.items():
        needing.add_metric([code], n)
    yield tasks
    yield needing

    # Sweeper lag: tasks that can advance now and that no runner holds. Each is counted from
    # when it last could be taken: its last entry (every change of a task writes one), its
    # wake-up time, the end of a lease that lapsed, or its birth — whichever came last.
    last_entry = Entry.objects.filter(task_id=OuterRef("pk")).order_by("-id").values("at")[:1]
    free = (
        task_list_runnable()
        .annotate(
            free_since=Greatest(
                "created_at",
                Subquery(last_entry),
                Case(When(status=TaskStatus.WAITING, then="wake_at")),
                "lease_expires_at",
            )
        )
        .aggregate(n=Count("pk"), oldest=Min("free_since"))
    )
    untaken = GaugeMetricFamily(
        "agentops_tasks_runnable_untaken",
        "Tasks that can advance now and that no runner holds (the sweeper rings for them).",
    )
    untaken.add_metric([], free["n"])
    yield untaken
    lag = GaugeMetricFamily(
        "agentops_task_runnable_untaken_oldest_seconds",
        "Seconds since the oldest of them could have been taken by a worker (0: none): the "
        "sweeper's and the workers' lag.",
    )
    lag.add_metric([], _age(now, free["oldest"]))
    yield lag


def step_gauges(now: datetime) -> Iterator[GaugeMetricFamily]:
    count = GaugeMetricFamily(
        "agentops_steps_unknown",
        "Steps whose effect may or may not have happened (unknown), by tool.",
        labels=["tool"],
    )
    oldest = GaugeMetricFamily(
        "agentops_step_unknown_oldest_seconds",
        "Seconds since the first attempt of the oldest unknown step, by tool.",
        labels=["tool"],
    )
    rows = (
        Step.objects.filter(state=StepState.UNKNOWN)
        .values_list("tool")
        .annotate(n=Count("pk"), first=Min("first_started_at"))
        .order_by()
    )
    for tool, n, first in rows:
        count.add_metric([tool], n)
        oldest.add_metric([tool], _age(now, first))
    yield count
    yield oldest
    expected = GaugeMetricFamily(
        "agentops_step_settle_expected_seconds",
        "How long an unknown step may take to settle by lookups alone: the whole "
        "RECONCILE_SCHEDULE. An unknown step older than this is with a person.",
    )
    expected.add_metric([], float(sum(settings.RECONCILE_SCHEDULE)))
    yield expected


def approval_gauges(now: datetime) -> Iterator[GaugeMetricFamily]:
    # The partial unique index on open approvals (pending or approved) serves this.
    pending = Approval.objects.filter(
        state__in=[ApprovalState.PENDING, ApprovalState.APPROVED]
    ).aggregate(
        n=Count("pk", filter=Q(state=ApprovalState.PENDING)),
        oldest=Min("requested_at", filter=Q(state=ApprovalState.PENDING)),
        expiring=Count(
            "pk",
            filter=Q(state=ApprovalState.PENDING, expires_at__lte=now + EXPIRING_WITHIN),
        ),
    )
    waiting = GaugeMetricFamily(
        "agentops_approvals_pending",
        "Saga steps held for a person's approval, not yet decided.",
    )
    waiting.add_metric([], pending["n"])
    yield waiting
    age = GaugeMetricFamily(
        "agentops_approval_pending_oldest_seconds",
        "Seconds the oldest of them has waited (0: none).",
    )
    age.add_metric([], _age(now, pending["oldest"]))
    yield age
    expiring = GaugeMetricFamily(
        "agentops_approvals_expiring_soon",
        "Pending approvals that expire within the hour (APPROVAL_TTL_SECONDS): undecided then, "
        "the saga asks again.",
    )
    expiring.add_metric([], pending["expiring"])
    yield expiring


def queue_gauges() -> Iterator[GaugeMetricFamily]:
    from agentops.doorbell import run_queue

    queue = run_queue()
    depth = GaugeMetricFamily(
        "agentops_queue_jobs",
        "Runs waiting in the RQ queue for a worker (rung now, not scheduled for later).",
        labels=["queue"],
    )
    depth.add_metric([queue.name], queue.count)
    yield depth
    oldest = GaugeMetricFamily(
        "agentops_queue_oldest_job_seconds",
        "Seconds the oldest of them has waited (0: none).",
        labels=["queue"],
    )
    age = 0.0
    first = queue.get_job_ids(0, 1)
    if first:
        job = Job.fetch(first[0], connection=queue.connection, serializer=queue.serializer)
        if job.enqueued_at is not None:
            enqueued = job.enqueued_at
            now = datetime.now(tz=enqueued.tzinfo)
            age = max(0.0, (now - enqueued).total_seconds())
    oldest.add_metric([queue.name], age)
    yield oldest


def info_gauges() -> Iterator[GaugeMetricFamily]:
    info = GaugeMetricFamily(
        "agentops_info",
        "Always 1; its base_url label is where the operators' pages are "
        "(AGENTOPS_BASE_URL), for the alerts' links.",
        labels=["base_url"],
    )
    info.add_metric([settings.AGENTOPS_BASE_URL], 1)
    yield info


class JournalCollector(Collector):
    """Every gauge above; a source that fails is logged and shows as down, the rest served."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily(
            "agentops_collector_up",
            "Whether this scrape could read each source of gauges (1) or not (0: see the logs).",
            labels=["source"],
        )
        yield from info_gauges()
        database_ok = True
        try:
            now = db_now()
            families = [*task_gauges(now), *step_gauges(now), *approval_gauges(now)]
        except Exception:
            log.exception("metrics: the journal could not be read")
            database_ok, families = False, []
        yield from families
        up.add_metric(["database"], 1 if database_ok else 0)
        try:
            families = list(queue_gauges())
        except Exception:
            log.exception("metrics: the queue could not be read")
            families = []
        yield from families
        up.add_metric(["redis"], 1 if families else 0)
        for source in SOURCES:
            name = getattr(source, "__name__", repr(source))
            try:
                families = list(source())
            except Exception:
                log.exception("metrics: the gauge source %s failed", name)
                families = []
            yield from families
            up.add_metric([name], 1 if families else 0)
        yield up
