"""People's decisions about what happened to a step: recorded by the web server, applied by a
worker (docs/design.md §4, "A role for each kind of process").

The web server's database role records people's decisions but settles no step and records no
effect. So settling a step by hand and correcting one arrive in two moves, as a provider's
notification does (agentops/provider_events.py):

1. **decided** (the web server: ``journal_step_resolve``, ``journal_step_correct``): checked as
   a person's decision is, recorded with who and why, and a worker rung for it once that is
   committed;
2. **applied** (a worker: :func:`decision_apply`, the job ``apply_person_decision``): asked
   again under the task's lock (a provider's report may have settled the step meanwhile) and
   applied once, or left unapplied saying why; its settlement logged and counted as any.

A decision whose ring was lost, or whose application failed, is rung again by the sweeper
(:func:`decisions_sweep`), so nothing a person decided is lost.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from functools import partial

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now

from agentops.doorbell import decision_ring, task_ring
from agentops.telemetry.steps import settled_observed
from journal import operator
from journal.models import Decision, Step
from journal.status import waiters_wake

log = logging.getLogger(__name__)


def decision_rung(decision_id: int) -> int:
    """Ring for the decision once the current transaction commits; the decision's id."""
    transaction.on_commit(lambda: decision_ring(decision_id=decision_id))
    return decision_id


def decision_apply(*, decision_id: int) -> str:
    """Apply the decision (a worker's job): what it did, in a sentence. The settlement it made
    is logged and counted once committed, as any."""
    with transaction.atomic():
        said = operator.decision_apply(decision_id=decision_id)
        task_id, step_id, action, actor = (
            Decision.objects.filter(pk=decision_id)
            .values_list("task_id", "step_id", "action", "actor")
            .get()
        )
        if said.startswith("settled"):
            settled_observed(step_id=step_id)
            # Tasks the guard kept waiting on this step go on now, not at their backed-off
            # time (up to the longest lookup delay while the person held it).
            key = Step.objects.filter(pk=step_id).values_list("key", flat=True).get()
            for waiter in waiters_wake(key=key, actor=actor):
                transaction.on_commit(partial(task_ring, task_id=waiter))
        elif said.startswith("corrected as step "):
            n = int(said.removeprefix("corrected as step "))
            made = Step.objects.filter(task_id=task_id, n=n).values_list("pk", flat=True).get()
            settled_observed(step_id=made)
    log.info("a person's decision %s (%s): %s", decision_id, action, said)
    return said


def decisions_sweep(*, limit: int = 100) -> int:
    """Ring again for every decision not applied since the sweep's grace; how many."""
    grace = timedelta(seconds=settings.SWEEP_GRACE_SECONDS)
    stale = list(
        Decision.objects.filter(applied_at__isnull=True, decided_at__lte=Now() - grace)
        .order_by("decided_at")
        .values_list("pk", flat=True)[:limit]
    )
    for decision_id in stale:
        decision_ring(decision_id=decision_id)
    if stale:
        log.info("rang again for %d people's decisions", len(stale))
    return len(stale)
