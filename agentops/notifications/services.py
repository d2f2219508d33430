"""Deriving deliveries from the journal, ringing for them, and attempting one (the design is in
agentops/notifications/__init__.py).

- :func:`notifications_derive`: the journal's status entries since the cursor, as deliveries
  (once each: the key is unique), rung for after commit;
- :func:`notifications_sweep`: the sweeper's part: derive, and ring again for every delivery
  whose attempt is due and that nobody rang for recently (a lost job, a dead worker, an
  empty Redis);
- :func:`delivery_attempt`: what a delivery's job does: claim, send, classify, settle, and
  ring again at the next retry.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import Now
from django.urls import reverse

from agentops.doorbell import run_queue
from agentops.effects._http import http_call
from agentops.notifications.models import Delivery, DeliveryCursor, DeliveryState
from agentops.notifications.signing import HEADER, signature
from agentops.telemetry import instruments as m
from agentops.workers import DELIVER_JOB
from journal.keys import KEY_PREFIX
from journal.models import EntryKind, TaskStatus
from journal.outcomes import NotSent, Observation, Outcome, Reply, StepState, classify

log = logging.getLogger("agentops.notifications")

# Each event a receiver may be told of: the entry journal_transition writes for it, and the
# status the task moved to (a compensated task's entry is a task_finished too).
EVENTS: dict[str, tuple[EntryKind, TaskStatus]] = {
    "needs_human": (EntryKind.TASK_FLAGGED, TaskStatus.NEEDS_HUMAN),
    "awaiting_approval": (EntryKind.APPROVAL_REQUESTED, TaskStatus.AWAITING_APPROVAL),
    "finished": (EntryKind.TASK_FINISHED, TaskStatus.FINISHED),
    "compensated": (EntryKind.TASK_FINISHED, TaskStatus.COMPENSATED),
}
# What of a status entry's data the payload carries (never the task's refs: the receiver
# reads those through the API, with a token that may).
CARRIED = ("code", "reason", "summary", "approval", "tool")
# The fraction of NOTIFY_KEY_LIFETIME_SECONDS not trusted (as journal.policy.Policy.key_margin).
KEY_MARGIN = 0.1
BATCH = 500
RANG_KEY = "agentops:notify:rang:{}"


def delivery_key(*, task_id: Any, entry_id: int) -> str:
    """``ao:notify:<task>:<entry id>``: the same event always has the same key."""
    return f"{KEY_PREFIX}:notify:{task_id}:{entry_id}"


def payload_body(payload: Mapping[str, Any]) -> bytes:
    """The bytes sent and signed: the same for every attempt of a delivery."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _task_url(task_id: str) -> str | None:
    base = settings.AGENTOPS_BASE_URL
    return f"{base}{reverse('operators:task', args=[task_id])}" if base else None


def _payload(*, key: str, event: str, row: Mapping[str, Any]) -> dict[str, Any]:
    data = row["data"] if isinstance(row["data"], dict) else {}
    task = {
        "id": str(row["task_id"]),
        "kind": row["task_kind"],
        "status": data.get("to", ""),
        "previous_status": data.get("from", ""),
        "url": _task_url(str(row["task_id"])),
    }
    return {
        "id": key,
        "event": f"task.{event}",
        "occurred_at": row["at"].isoformat(),
        "actor": row["actor"],
        "task": task,
        **{name: data[name] for name in CARRIED if data.get(name) not in (None, "")},
    }


# --- Deriving ---------------------------------------------------------------------------------

# One statement, one snapshot: the status entries after ``after`` that have no delivery yet,
# with the highest entry id this snapshot sees and its xmax (every row is the same for those).
FOUND = """
WITH snap AS (
    SELECT (SELECT max(id) FROM journal_entry) AS top,
           pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax
), found AS (
    SELECT e.id, e.task_id, e.at, e.actor, e.data, t.kind AS task_kind,
           e.at + make_interval(secs => %(trusted)s) AS key_until
      FROM journal_entry e
      JOIN journal_task t ON t.id = e.task_id
     WHERE e.id > %(after)s
       AND e.kind = ANY(%(kinds)s)
       AND e.data->>'to' = ANY(%(statuses)s)
       AND NOT EXISTS (SELECT 1 FROM agentops_notifications_delivery d WHERE d.entry_id = e.id)
     ORDER BY e.id
     LIMIT %(batch)s
)
SELECT snap.top, snap.xmax, found.* FROM snap LEFT JOIN found ON true ORDER BY found.id
"""


def _snapshot_xmin() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def _cursor_locked() -> DeliveryCursor | None:
    """The cursor, locked for this transaction; None when another derivation holds it. Made
    on first use at the newest entry: what happened before notifications were switched on is
    not sent."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO agentops_notifications_deliverycursor "
            "(id, safe_entry_id, updated_at) "
            "SELECT 1, COALESCE(max(id), 0), now() FROM journal_entry "
            "ON CONFLICT (id) DO NOTHING"
        )
    return DeliveryCursor.objects.select_for_update(skip_locked=True).filter(pk=1).first()


def notifications_derive() -> list[int]:
    """Turn the journal's status entries since the cursor into deliveries, ring for them once
    committed, and return their ids. Nothing when ``NOTIFY_URL`` is empty, or while another
    derivation runs (it will find the same entries)."""
    if not settings.NOTIFY_URL:
        return []
    events = [e for e in settings.NOTIFY_EVENTS if e in EVENTS]
    kinds = sorted({str(EVENTS[e][0]) for e in events})
    statuses = {str(EVENTS[e][1]): e for e in events}
    trusted = float(settings.NOTIFY_KEY_LIFETIME_SECONDS) * (1.0 - KEY_MARGIN)
    made: list[Delivery] = []
    with transaction.atomic():
        cursor = _cursor_locked()
        if cursor is None:
            return []
        # Every transaction in flight when the last derivation looked has ended since: all it
        # could commit up to seen_entry_id is visible to the scans below.
        settled = cursor.seen_xmax is not None and _snapshot_xmin() >= cursor.seen_xmax
        while True:
            with connection.cursor() as db:
                db.execute(
                    FOUND,
                    {
                        "after": cursor.safe_entry_id,
                        "kinds": kinds,
                        "statuses": list(statuses),
                        "trusted": trusted,
                        "batch": BATCH,
                    },
                )
                names = [c.name for c in db.description or ()]
                rows = [dict(zip(names, r, strict=True)) for r in db.fetchall()]
            top, xmax = rows[0]["top"], rows[0]["xmax"]
            found = [r for r in rows if r["id"] is not None]
            for r in found:  # Django's cursor hands jsonb over as text
                r["data"] = json.loads(r["data"]) if isinstance(r["data"], str) else r["data"]
            made += _deliveries_made(found, statuses)
            if len(found) < BATCH:
                break
        # The last batch's snapshot saw every status entry up to `top` but those of
        # transactions still open then (all older than `xmax`): kept until those have ended.
        if settled or cursor.seen_xmax is None:
            if settled and cursor.seen_entry_id is not None:
                cursor.safe_entry_id = max(cursor.safe_entry_id, cursor.seen_entry_id)
            cursor.seen_entry_id, cursor.seen_xmax = top or cursor.safe_entry_id, xmax
            cursor.updated_at = Now()
            cursor.save(update_fields=["safe_entry_id", "seen_entry_id", "seen_xmax", "updated_at"])
    ids = [d.pk for d in made if d.state == DeliveryState.QUEUED]
    for delivery_id in ids:
        _ring_quietly(delivery_id)
    for d in made:
        log.info(
            "notification %s (%s) derived for task %s",
            d.key,
            d.event,
            d.task_id,
            extra={"task_id": str(d.task_id), "key": d.key, "event": d.event, "state": d.state},
        )
        if d.state != DeliveryState.QUEUED:
            m.NOTIFICATIONS.labels(event=d.event, outcome="not_done").inc()
    return ids


def _deliveries_made(found: list[dict[str, Any]], statuses: Mapping[str, str]) -> list[Delivery]:
    if not found:
        return []
    with connection.cursor() as db:
        db.execute("SELECT now()")
        (now,) = db.fetchone() or (None,)
    if not isinstance(now, datetime):
        raise TypeError(f"SELECT now() gave {now!r}")
    rows = []
    for row in found:
        data = row["data"] if isinstance(row["data"], dict) else {}
        event = statuses[data["to"]]
        key = delivery_key(task_id=row["task_id"], entry_id=row["id"])
        late = row["key_until"] <= now
        rows.append(
            Delivery(
                task_id=row["task_id"],
                entry_id=row["id"],
                event=event,
                key=key,
                payload=_payload(key=key, event=event, row=row),
                key_until=row["key_until"],
                # Found after its key would have died (the sweeper was down that long): it is
                # never sent, and says so.
                state=DeliveryState.NOT_DONE if late else DeliveryState.QUEUED,
                detail="never sent: the event was older than the key's trusted life "
                "(NOTIFY_KEY_LIFETIME_SECONDS) when it was found"
                if late
                else "",
                next_attempt_at=None if late else now,
                settled_at=now if late else None,
            )
        )
    # Derivations take turns (the cursor's lock) and each found only entries without a
    # delivery, so these rows are new; the unique entry and key would make a second insert of
    # one a no-op all the same.
    Delivery.objects.bulk_create(rows, ignore_conflicts=True)
    return list(Delivery.objects.filter(key__in=[r.key for r in rows]).order_by("id"))


# How a worker's run may stop that is an event a receiver may be told of.
RUN_STOPS = frozenset({"finished", "compensated", "needs_human", "awaiting_approval"})


def notifications_after_run(*, stopped: str) -> None:
    """After a worker's run stopped in a status worth telling, derive its notification now
    rather than at the next sweep. A doorbell: failing here loses nothing."""
    if stopped not in RUN_STOPS or not settings.NOTIFY_URL:
        return
    try:
        notifications_derive()
    except Exception as exc:
        log.warning(
            "notifications not derived after a run (%s); the sweeper will",
            type(exc).__name__,
            extra={"error": str(exc)[:300]},
        )


# --- Ringing ----------------------------------------------------------------------------------


def delivery_ring(*, delivery_id: int, at: datetime | None = None) -> None:
    """Enqueue an attempt of the delivery, now or at ``at``. Losing this loses nothing: the
    sweeper rings for every delivery that is due and was not rung for recently."""
    queue = run_queue()
    options: dict[str, Any] = {
        "job_timeout": int(4 * settings.NOTIFY_TIMEOUT_SECONDS + 30),
        "result_ttl": 0,
        "failure_ttl": 7 * 24 * 3600,
        "description": f"notify {delivery_id}",
    }
    grace = float(settings.SWEEP_GRACE_SECONDS)
    if at is None:
        queue.enqueue(DELIVER_JOB, delivery_id, **options)
        quiet = grace
    else:
        queue.enqueue_at(at, DELIVER_JOB, delivery_id, **options)
        quiet = max(0.0, (at - datetime.now(tz=at.tzinfo)).total_seconds()) + grace
    queue.connection.set(RANG_KEY.format(delivery_id), "1", px=max(1, round(1000 * quiet)))


def _ring_quietly(delivery_id: int, at: datetime | None = None) -> None:
    try:
        delivery_ring(delivery_id=delivery_id, at=at)
    except Exception as exc:  # Redis away: the sweeper rings for it once it is due
        log.warning(
            "notification %s: could not ring (%s); the sweeper will",
            delivery_id,
            type(exc).__name__,
            extra={"delivery_id": delivery_id, "error": str(exc)[:300]},
        )


def notifications_sweep() -> int:
    """Derive, then ring for every open delivery whose attempt is due and that nobody rang for
    within SWEEP_GRACE_SECONDS. Returns how many were rung for."""
    if not settings.NOTIFY_URL:
        return 0
    rung = len(notifications_derive())
    redis = run_queue().connection
    due = Delivery.objects.filter(settled_at__isnull=True, next_attempt_at__lte=Now())
    for delivery_id in due.order_by("next_attempt_at").values_list("pk", flat=True)[:BATCH]:
        if redis.exists(RANG_KEY.format(delivery_id)):
            continue
        delivery_ring(delivery_id=delivery_id)
        rung += 1
    return rung


# --- One attempt ------------------------------------------------------------------------------


# What an attempt's answer changes (the rest of a delivery is frozen: agentops/dbroles.py).
ANSWER_FIELDS = [
    "state",
    "next_attempt_at",
    "last_status",
    "detail",
    "evidence",
    "misconfigured",
    "settled_at",
]


@dataclass(frozen=True)
class Claim:
    delivery: Delivery
    earlier: bool
    """An earlier attempt may have arrived: its answer said so, or its worker died mid-call."""


def _claim_seconds() -> float:
    """Longer than one call can take (connect, then read, each up to the timeout). A claim
    that lapses mid-call only lets a second attempt of the same key start: the receiver
    deduplicates, and only the newest attempt's answer is written."""
    return 3 * float(settings.NOTIFY_TIMEOUT_SECONDS)


def _claim(delivery_id: int) -> Claim | None:
    with transaction.atomic():
        row = (
            # Its own row only: the model's ordering joins its task, which no app role may lock.
            Delivery.objects.select_for_update(skip_locked=True, of=("self",))
            .annotate(db_now=Now())
            .filter(pk=delivery_id, settled_at__isnull=True, next_attempt_at__lte=Now())
            .first()
        )
        if row is None:
            return None  # settled, not due yet, or being attempted now
        now: datetime = row.db_now
        earlier = row.state in (DeliveryState.UNKNOWN, DeliveryState.SENDING)
        if row.key_until <= now:
            _give_up(row, now=now, earlier=earlier, why="the key's trusted life ended")
            row.save(update_fields=ANSWER_FIELDS)
            _settled_observed(row)
            return None
        row.state = DeliveryState.SENDING
        row.attempts += 1
        row.last_attempt_at = now
        row.next_attempt_at = now + timedelta(seconds=_claim_seconds())
        row.save(update_fields=["state", "attempts", "last_attempt_at", "next_attempt_at"])
    return Claim(row, earlier)


def _give_up(row: Delivery, *, now: datetime, earlier: bool, why: str) -> None:
    """No more attempts. Unknown stays unknown; never sent is not done."""
    row.state = DeliveryState.UNKNOWN if earlier else DeliveryState.NOT_DONE
    row.detail = (
        f"{row.detail}; given up: {why}, and it may have arrived"
        if earlier
        else f"never delivered: {why} before the receiver could be reached"
        + (f" ({row.detail})" if row.detail else "")
    )
    row.next_attempt_at = None
    row.settled_at = now


def _evidence(observation: Observation) -> dict[str, Any]:
    if not isinstance(observation, Reply):
        return {}
    found: dict[str, Any] = {"status": observation.status}
    receiver_id = observation.evidence.get("id")
    if isinstance(receiver_id, str | int) and not isinstance(receiver_id, bool):
        found["id"] = str(receiver_id)[:255]
    return found


def _settle(claim: Claim, observation: Observation, outcome: Outcome) -> Delivery | None:
    """Write what the attempt's answer means; None if a later attempt took the delivery over
    (this one outlived its claim)."""
    attempt = claim.delivery.attempts
    with transaction.atomic():
        row = Delivery.objects.select_for_update().annotate(db_now=Now()).get(pk=claim.delivery.pk)
        if row.state != DeliveryState.SENDING or row.attempts != attempt:
            return None
        now: datetime = row.db_now
        row.last_status = observation.status if isinstance(observation, Reply) else None
        row.detail = outcome.detail[:2000]
        row.misconfigured = bool(outcome.data.get("misconfigured"))
        transient = outcome.state == StepState.NOT_DONE and bool(outcome.data.get("transient"))
        if outcome.state == StepState.DONE:
            row.state, row.evidence = DeliveryState.DONE, _evidence(observation)
            row.next_attempt_at, row.settled_at = None, now
        elif outcome.state == StepState.NOT_DONE and not transient:
            row.state = DeliveryState.NOT_DONE
            row.next_attempt_at, row.settled_at = None, now
        else:
            # Unknown, or never sent: the same key and body again after the schedule's delay,
            # while the key is trusted.
            earlier = claim.earlier or outcome.state == StepState.UNKNOWN
            row.state = DeliveryState.UNKNOWN if earlier else DeliveryState.QUEUED
            schedule = tuple(settings.NOTIFY_RETRY_SCHEDULE) or (60.0,)
            delay = schedule[min(attempt - 1, len(schedule) - 1)]
            next_at = now + timedelta(seconds=delay)
            if next_at >= row.key_until:
                _give_up(row, now=now, earlier=earlier, why="the key's trusted life ends")
            else:
                row.next_attempt_at = next_at
        row.save(update_fields=ANSWER_FIELDS)
    return row


def delivery_attempt(*, delivery_id: int) -> str:
    """One attempt of a delivery, if it is due and nobody is attempting it: the signed POST
    with its key, its answer classified (``journal.outcomes.classify``), settled, and the
    next retry rung for. Returns the delivery's state after it (or why nothing was sent)."""
    url, secret = settings.NOTIFY_URL, settings.NOTIFY_SECRET
    if not url or not secret:  # never unsigned (a system check refuses it at start too)
        return "off"
    claim = _claim(delivery_id)
    if claim is None:
        return "not_due"
    row = claim.delivery
    body = payload_body(row.payload)
    started = time.monotonic()
    observation = http_call(
        "POST",
        url,
        key=row.key,
        timeout=float(settings.NOTIFY_TIMEOUT_SECONDS),
        content=body,
        headers={
            "Content-Type": "application/json",
            HEADER: signature(secret=secret, body=body, timestamp=int(time.time())),
            "Agentops-Event": row.payload.get("event", row.event),
            "User-Agent": "agentops-notifications/1",
        },
    )
    outcome = classify(observation, earlier_attempt=claim.earlier)
    settled = _settle(claim, observation, outcome)
    what = (
        "not_sent"
        if isinstance(observation, NotSent) and outcome.state == StepState.NOT_DONE
        else str(outcome.state)
    )
    m.NOTIFICATION_ATTEMPTS.labels(outcome=what).inc()
    if settled is None:
        return "overtaken"
    level = logging.ERROR if settled.misconfigured else logging.INFO
    log.log(
        level,
        "notification %s (%s) attempt %s: %s",
        row.key,
        row.event,
        settled.attempts,
        settled.detail,
        extra={
            "task_id": str(row.task_id),
            "key": row.key,
            "event": row.event,
            "state": settled.state,
            "attempt": settled.attempts,
            "status": settled.last_status,
            "seconds": round(time.monotonic() - started, 3),
            "misconfigured": settled.misconfigured,
        },
    )
    if settled.settled_at is not None:
        _settled_observed(settled)
    elif settled.next_attempt_at is not None:
        _ring_quietly(settled.pk, at=settled.next_attempt_at)
    return str(settled.state)


def _settled_observed(row: Delivery) -> None:
    outcome = "misconfigured" if row.misconfigured and row.state != "done" else str(row.state)
    m.NOTIFICATIONS.labels(event=row.event, outcome=outcome).inc()
