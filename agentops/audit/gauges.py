"""The audit's gauges, at each scrape (agentops/telemetry/collector.py's ``gauge_source``): the
open findings, through the partial index on open findings, and when each provider was last
audited, from its one row."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily

from agentops.audit.models import Finding, ProviderWatch
from agentops.effects import audits
from agentops.telemetry.collector import gauge_source


@gauge_source
def audit() -> Iterator[GaugeMetricFamily]:
    """Shown as ``agentops_collector_up{source="audit"}``."""
    open_ = GaugeMetricFamily(
        "agentops_audit_findings_open",
        "Provider audit findings nobody has resolved yet: effects at a provider that the "
        "journal does not account for, or the other way round (docs/operating/audit.md).",
    )
    open_.add_metric([], Finding.objects.open().count())
    yield open_
    last = GaugeMetricFamily(
        "agentops_audit_last_success_timestamp_seconds",
        "When the last audit of each provider that could list its effects ended (absent: never).",
        labels=["provider"],
    )
    watched = ProviderWatch.objects.filter(provider__in=sorted(audits()), audited_at__isnull=False)
    for provider, at in watched.values_list("provider", "audited_at"):
        if at is not None:
            last.add_metric([provider], at.timestamp())
    yield last
