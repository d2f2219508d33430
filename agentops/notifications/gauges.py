"""The open deliveries, at each scrape (agentops/telemetry/collector.py's ``gauge_source``),
read through the partial index on open deliveries."""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count, Min
from prometheus_client.core import GaugeMetricFamily

from agentops.notifications.models import Delivery
from agentops.telemetry.collector import db_now, gauge_source


@gauge_source
def notifications() -> Iterator[GaugeMetricFamily]:
    """Shown as ``agentops_collector_up{source="notifications"}``."""
    now = db_now()
    open_ = Delivery.objects.filter(settled_at__isnull=True).aggregate(
        n=Count("pk"), oldest=Min("next_attempt_at")
    )
    count = GaugeMetricFamily(
        "agentops_notifications_open",
        "Notifications not yet answered 2xx or refused, and not given up: queued, in flight or "
        "unknown and being retried.",
    )
    count.add_metric([], open_["n"])
    yield count
    late = GaugeMetricFamily(
        "agentops_notification_overdue_seconds",
        "How long the most overdue of them has been due for an attempt (0: none, or none "
        "overdue): the workers' or the sweeper's lag for notifications.",
    )
    oldest = open_["oldest"]
    late.add_metric([], 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds()))
    yield late
