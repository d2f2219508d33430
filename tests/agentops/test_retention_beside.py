"""What agentops keeps beside the journal goes by the journal's keep (issue 19; docs/design.md
§17): a provider's notifications received before it, the audit's findings resolved before it
and its runs over before it with no finding left. An open finding stays, however old, with
its run; with no keep, nothing goes; the app's role cannot delete any of it by itself."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from agentops.audit.models import AuditRun, AuditTrigger, Finding, FindingKind
from agentops.models import WebhookEvent
from agentops.retention import journal_retain, report_lines
from journal.models import Retention
from journal.retention import retention_configure
from tests.databases import owner_connection

pytestmark = pytest.mark.usefixtures("committed")

DAY = 86400.0


def _keep(seconds: float | None) -> Iterator[None]:
    owner = owner_connection().alias
    before = Retention.objects.using(owner).get(pk=1)
    retention_configure(
        using=owner,
        partition_seconds=before.partition_seconds,
        ahead=before.ahead,
        keep_seconds=seconds,
    )
    try:
        yield
    finally:
        retention_configure(
            using=owner,
            partition_seconds=before.partition_seconds,
            ahead=before.ahead,
            keep_seconds=before.keep_seconds,
        )


@pytest.fixture
def day_keep(committed: None) -> Iterator[None]:
    """The journal kept a day after its tasks are over, as the owner sets it."""
    yield from _keep(DAY)


@pytest.fixture
def kept_for_good(committed: None) -> Iterator[None]:
    yield from _keep(None)


def _event(at: timedelta) -> WebhookEvent:
    return WebhookEvent.objects.create(
        id=f"evt_{uuid.uuid4().hex}",
        provider="payments",
        type="payment_intent.succeeded",
        received_at=timezone.now() - at,
    )


def _run(at: timedelta) -> AuditRun:
    when = timezone.now() - at
    return AuditRun.objects.create(
        provider="payments",
        trigger=AuditTrigger.SCHEDULE,
        since=when - timedelta(days=1),
        until=when,
        started_at=when,
        finished_at=when,
    )


def _finding(run: AuditRun, *, resolved: timedelta | None) -> Finding:
    when = timezone.now() - resolved if resolved is not None else None
    return Finding.objects.create(
        provider=run.provider,
        kind=FindingKind.NO_STEP,
        effect_id=f"pi_{uuid.uuid4().hex[:20]}",
        run=run,
        summary="the provider has a charge no step made",
        found_at=run.started_at,
        resolved_at=when,
        resolved_by="operator:ada" if when else "",
        resolution="refunded by hand" if when else "",
    )


def _exists(model: type, pk: object) -> bool:
    return bool(model.objects.filter(pk=pk).exists())  # type: ignore[attr-defined]


@pytest.mark.usefixtures("day_keep")
def test_notifications_and_resolved_findings_older_than_the_keep_go() -> None:
    old_event, recent_event = _event(timedelta(days=400)), _event(timedelta(hours=1))
    resolved_run = _run(timedelta(days=400))
    resolved = _finding(resolved_run, resolved=timedelta(days=300))
    recently_resolved = _finding(_run(timedelta(days=400)), resolved=timedelta(hours=1))
    open_run = _run(timedelta(days=400))
    still_open = _finding(open_run, resolved=None)
    empty_old, empty_recent = _run(timedelta(days=400)), _run(timedelta(hours=1))

    report = journal_retain()

    assert not _exists(WebhookEvent, old_event.pk)
    assert _exists(WebhookEvent, recent_event.pk)
    # A finding a person resolved long ago goes, and its run with it, having no other.
    assert not _exists(Finding, resolved.pk) and not _exists(AuditRun, resolved_run.pk)
    # Resolved within the keep: it stays, and so does its run.
    assert _exists(Finding, recently_resolved.pk)
    assert _exists(AuditRun, recently_resolved.run_id)
    # Nobody has looked at it yet: it stays, however old, with its run.
    assert _exists(Finding, still_open.pk) and _exists(AuditRun, open_run.pk)
    assert not _exists(AuditRun, empty_old.pk) and _exists(AuditRun, empty_recent.pk)
    for table in ("agentops_webhookevent", "agentops_audit_finding", "agentops_audit_auditrun"):
        assert report.forgotten[table] >= 1, table
    assert any(
        line.startswith("forgot ") and "agentops_webhookevent" in line
        for line in report_lines(report)
    )


@pytest.mark.usefixtures("kept_for_good")
def test_with_no_keep_nothing_beside_the_journal_goes() -> None:
    event = _event(timedelta(days=4000))
    run = _run(timedelta(days=4000))
    resolved = _finding(run, resolved=timedelta(days=4000))
    report = journal_retain()
    assert report.forgotten == {
        "agentops_webhookevent": 0,
        "agentops_audit_finding": 0,
        "agentops_audit_auditrun": 0,
    }
    assert _exists(WebhookEvent, event.pk) and _exists(Finding, resolved.pk)


@pytest.mark.parametrize(
    "table", ["agentops_webhookevent", "agentops_audit_finding", "agentops_audit_auditrun"]
)
def test_the_apps_role_cannot_forget_anything_itself(table: str) -> None:
    with (
        pytest.raises(DatabaseError, match="permission denied"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(f"DELETE FROM {table}")  # noqa: S608 - our own table names
