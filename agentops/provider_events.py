"""Providers' notifications (webhooks): stored by the web server as received, verified and
applied by a worker (docs/design.md §4, "A role for each kind of process").

The web server's database role may store an event but settle no step: settling is the
workers'. So a notification arrives in two moves:

1. **received** (the web server, ``agentops.effects.store_provider_event``): the body and
   its signature stored once by the event's id, exactly as received, and a worker rung for
   it once that is committed. A provider that delivers again is answered "duplicate";
2. **applied** (a worker, :func:`provider_event_apply`, the job ``apply_provider_event``):
   the app that serves the provider's webhook verifies the signature with the provider's
   secret, from the body as stored, and applies what it reports
   (``effects.register_event_applier``); the body is emptied once applied.

A stored event is applied once (its row is locked while it is, and marked applied in the
same transaction); one whose application failed, or whose ring was lost, is rung again by
the sweeper (:func:`provider_events_sweep`), so nothing received is lost. A row that did not
come from the provider (written with the web server's credentials) fails the signature,
and settles nothing.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db.models.functions import Now

from agentops.doorbell import provider_event_ring
from agentops.effects._registry import registry
from agentops.models import WebhookEvent
from agentops.telemetry.steps import event_observed

log = logging.getLogger(__name__)


def provider_event_apply(*, provider: str, event_id: str) -> str:
    """Apply the stored event with its provider's applier (a worker's job): what it did, in a
    sentence. An event applied already is left alone."""
    apply = registry.event_appliers.get(provider)
    if apply is None:
        return f"no applier is declared for provider {provider!r}: left stored"
    try:
        return apply(event_id)
    except Exception:
        # Rolled back, and left stored: the sweeper rings again.
        event_observed(provider=provider, outcome="failed")
        log.exception("applying %s event %s failed; it is tried again", provider, event_id)
        raise


def provider_events_unapplied() -> list[tuple[str, str]]:
    """The events stored and not applied yet, oldest first, as (provider, id)."""
    return list(
        WebhookEvent.objects.filter(applied_at__isnull=True)
        .order_by("received_at")
        .values_list("provider", "id")
    )


def provider_events_sweep(*, limit: int = 100) -> int:
    """Ring again for every event stored and not applied since the sweep's grace (a ring
    lost, a worker that failed or died while applying it); how many."""
    grace = timedelta(seconds=settings.SWEEP_GRACE_SECONDS)
    stale = list(
        WebhookEvent.objects.filter(applied_at__isnull=True, received_at__lte=Now() - grace)
        .order_by("received_at")
        .values_list("provider", "id")[:limit]
    )
    for provider, event_id in stale:
        provider_event_ring(provider=provider, event_id=event_id)
    if stale:
        log.info("rang again for %d stored provider events", len(stale))
    return len(stale)
