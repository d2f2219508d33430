"""The counters, histograms and the heartbeat gauge, recorded where things happen.

Every process (gunicorn's workers, the RQ workers, the sweeper) records into them; in
multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set, as the launcher and the tests do) each
writes its own files there and ``/metrics`` adds them up (agentops/telemetry/exposition.py).
That variable is read when prometheus_client is first imported, so it must be in the
process's environment from its start, never set from Python.

They live in a registry of their own, not prometheus_client's default one: in multiprocess
mode the values are read back from the files, and the default registry's process collectors
would describe only the process that answers the scrape.

Steps are counted from what the journal committed (agentops/telemetry/steps.py), never from
what a call saw before it was recorded.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from agentops import version

REGISTRY = CollectorRegistry(auto_describe=True)

STEPS = Counter(
    "agentops_steps",
    "Steps by tool and outcome, counted once each as the journal commits it: done and not_done "
    "when a step settles (by its attempt, a lookup, a provider's notification or a person), "
    "refused when a step is recorded refused (never sent), unknown the first time a step is "
    "found unknown (such a step is counted again when it settles).",
    ["tool", "outcome"],
    registry=REGISTRY,
)
REFUSALS = Counter(
    "agentops_step_refusals",
    "Decisions recorded refused and never sent, by refusal code (journal.protocols.Refusal: "
    "already_done, in_flight, not_this_tasks, limit, order, unknown_tool, invalid_arguments).",
    ["code"],
    registry=REGISTRY,
)
LOOKUPS = Counter(
    "agentops_lookups",
    "Lookups of open steps at their provider, by tool and what they found: done, not_done, "
    "not_found, or failed (the provider could not tell).",
    ["tool", "result"],
    registry=REGISTRY,
)
COMPENSATIONS = Counter(
    "agentops_compensations",
    "Compensations (a saga's undo steps: refunds, releases, cancellations) by tool and "
    "outcome, counted as agentops_steps counts them.",
    ["tool", "outcome"],
    registry=REGISTRY,
)
RUNS = Counter(
    "agentops_runs",
    "Runs of a task on a worker, by why they stopped: finished, compensated, cancelled, "
    "waiting, awaiting_approval, needs_human, busy (another runner held the task), or "
    "database_lost.",
    ["stopped"],
    registry=REGISTRY,
)
WEBHOOK_REPORTS = Counter(
    "agentops_webhook_reports",
    "Provider notifications' reports about steps, by provider and what they did: applied "
    "(settled an open step), unchanged (the step had settled so already: a repeat or a late "
    "report), conflict (it contradicts the journal or does not match the step it names: the "
    "task goes to a person).",
    ["provider", "outcome"],
    registry=REGISTRY,
)
WEBHOOK_EVENTS = Counter(
    "agentops_webhook_events",
    "Provider notifications (webhook events) received, by provider and what became of each, "
    "counted once per delivery: applied (it settled a step), unchanged (it named steps that "
    "had settled so already, or reported an outcome not final yet), conflict (it contradicts "
    "the journal or does not match the step it names: the task goes to a person), ignored "
    "(stored, but about no step of agentops', or of a type not handled), duplicate (an event id "
    "stored before: acknowledged, not applied again), refused (a bad signature, a malformed or "
    "too large body, no secret configured: answered 4xx, nothing kept), failed (applying it "
    "failed: answered 500, nothing kept, so the provider's redelivery applies it).",
    ["provider", "outcome"],
    registry=REGISTRY,
)
NOTIFICATIONS = Counter(
    "agentops_notifications",
    "Notifications to NOTIFY_URL (agentops/notifications) by event and how they ended, counted "
    "once each when they stop being tried: done (the receiver answered 2xx), not_done (it "
    "refused, or it could never be sent while the key lived), misconfigured (it refused us: "
    "401, 403, 404, 421: the secret or the address), unknown (given up when the key died; it "
    "may have arrived).",
    ["event", "outcome"],
    registry=REGISTRY,
)
NOTIFICATION_ATTEMPTS = Counter(
    "agentops_notification_attempts",
    "Attempts of notifications by what the answer was: done, not_done (refused), unknown "
    "(retried with the same key), not_sent (the receiver could not be reached; retried).",
    ["outcome"],
    registry=REGISTRY,
)

# A call's time from its attempt committed to its outcome committed, by the database's clock.
ATTEMPT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
ATTEMPT_SECONDS = Histogram(
    "agentops_step_attempt_seconds",
    "Seconds from an attempt's start to its outcome, both as the journal committed them (the "
    "provider's latency, and a timed-out call's full wait), by tool.",
    ["tool"],
    buckets=ATTEMPT_BUCKETS,
    registry=REGISTRY,
)
# From seconds (a webhook) to the end of the lookup schedule (minutes), to a person (hours).
UNKNOWN_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600)
UNKNOWN_SECONDS = Histogram(
    "agentops_step_unknown_seconds",
    "Seconds a step stayed unknown: from the journal first saying so to its settlement, by tool.",
    ["tool"],
    buckets=UNKNOWN_BUCKETS,
    registry=REGISTRY,
)

HEARTBEAT = Gauge(
    "agentops_heartbeat_timestamp_seconds",
    "When a process of this kind last showed it was working (Unix time): a worker waiting "
    "for or running a job, the sweeper finishing a sweep. The latest across processes.",
    ["process"],
    # The newest beat of any process of the kind, dead ones included: it only moves on while
    # one is alive, which is what the alert asks.
    multiprocess_mode="max",
    registry=REGISTRY,
)

VERSION_SEEN = Gauge(
    "agentops_version_seen_timestamp_seconds",
    "When a process of this kind running this version (AGENTOPS_VERSION, or the package's "
    "version and commit) last showed it was alive (Unix time): during a rolling deploy, one "
    "series per version still running; after it, the old version's stops moving.",
    ["process", "version"],
    multiprocess_mode="max",
    registry=REGISTRY,
)

WORKER = "worker"
SWEEPER = "sweeper"
WEB = "web"


def heartbeat(process: str) -> None:
    """Note that a process of this kind (``worker``, ``sweeper``) is doing its job now."""
    now = time.time()
    HEARTBEAT.labels(process=process).set(now)
    version_seen(process, now)


def version_seen(process: str, now: float | None = None) -> None:
    """Note that a process of this kind runs this version, now."""
    VERSION_SEEN.labels(process=process, version=version.running_version()).set(
        time.time() if now is None else now
    )
