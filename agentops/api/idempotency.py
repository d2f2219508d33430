"""The ``Idempotency-Key`` request header (IETF draft "The Idempotency-Key HTTP Header
Field"), on every POST of the API.

A client that sends a POST again after a timeout or a dropped connection — not knowing
whether the first one acted — sends the same key, and is answered as the first one was,
with ``Idempotent-Replayed: true``; nothing is done twice. Per client and key, in
PostgreSQL (``IdempotencyKey``, unique on client and key):

1. **claim**: the row is inserted ``in_progress`` in a transaction of its own, before any
   work, with a fingerprint of the request (method, path and body; a JSON body in a
   canonical form, so its keys' order and spacing do not matter). Of two requests with the
   same key, in any gunicorn workers, one inserts it and the other finds it.
2. **work and answer**: in one transaction that holds the row's lock, the work is done and
   its answer stored on the row (``completed``). They commit together or not at all: a
   request that dies half-way leaves the row claimed, unlocked, with no work committed, and
   the next request with the key does the work. (The doorbell a task's start rings goes
   after that commit.)
3. another request with the key: a different fingerprint is **422** (the key belongs to
   another request); a completed row is **replayed** (same status, same body); a row whose
   lock is held is **409** (the first request is still being answered: try again); a claimed
   row nobody holds is taken over, as in 2. The inserter itself waits for the lock instead of
   failing, so a request that finds the key in the moment between its claim and its lock
   does the work, and the inserter replays its answer.

Every answer the work gives is stored, refusals included (a 409 for a task that is not
waiting for a person, a 422 for refs that are refused): the same request gets the same
answer. What never reaches the work — a body that is not valid, a missing scope, the rate
limit — is not stored. A key is kept ``API_IDEMPOTENCY_TTL_SECONDS`` (24 h); after that the
same key starts afresh (its row is claimed again). A POST without the header is done each
time it is sent: strongly discouraged for starting tasks.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.db.models import Q
from django.db.models.functions import Now

from agentops.models import ApiClient, IdempotencyKey, IdempotencyState

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
KEY_MAX_LENGTH = 255
LOCK_NOT_AVAILABLE = "55P03"


@dataclass(frozen=True)
class Answer:
    """A response as it is stored: its status and its JSON body."""

    status: int
    body: str
    replayed: bool = False


def problem(status: int, detail: str, **more: object) -> Answer:
    return Answer(status, json.dumps({"detail": detail, **more}))


class BadKey(ValueError):
    """An ``Idempotency-Key`` header that is not a key: 400."""


def key_of(header: str | None) -> str | None:
    """The key a header carries: a Structured Field string (``"8e03978e-…"``, as the draft
    writes it) or, leniently, the bare text. None without the header."""
    if header is None:
        return None
    value = header.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    if not value or len(value) > KEY_MAX_LENGTH:
        raise BadKey(f"{HEADER}: 1 to {KEY_MAX_LENGTH} characters")
    if not all(" " <= c <= "~" for c in value):
        raise BadKey(f"{HEADER}: printable ASCII only")
    return value


def request_fingerprint(*, method: str, path: str, body: bytes) -> str:
    try:
        canonical = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode()
    except ValueError:
        canonical = body
    digest = hashlib.sha256()
    for part in (method.upper().encode(), path.encode(), canonical):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def _claim(*, client: ApiClient, key: str, fingerprint: str) -> bool:
    """Insert the key's row in a transaction of its own (committed at once, so every other
    worker sees it); whether this request inserted it."""
    if connection.in_atomic_block:
        # Inside another transaction the claim would be a savepoint, seen by nobody else
        # until that one commits: two workers could both do the work.
        raise RuntimeError("an Idempotency-Key is claimed in a transaction of its own")
    table = connection.ops.quote_name(IdempotencyKey._meta.db_table)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {table} (client_id, key, fingerprint, state, response_body, claimed_at,
                                 expires_at)
            VALUES (%s, %s, %s, %s, '', now(), now() + make_interval(secs => %s))
            ON CONFLICT (client_id, key) DO NOTHING
            RETURNING id
            """,  # noqa: S608 (the table's name is ours, quoted)
            [
                client.pk,
                key,
                fingerprint,
                IdempotencyState.IN_PROGRESS,
                settings.API_IDEMPOTENCY_TTL_SECONDS,
            ],
        )
        return cursor.fetchone() is not None


def _locked(*, client: ApiClient, key: str, wait: bool) -> IdempotencyKey | None:
    """The key's row, locked until the transaction ends; None if another request holds it
    (only when not ``wait``)."""
    try:
        with transaction.atomic():  # a savepoint: a refused lock leaves the outer one usable
            return (
                IdempotencyKey.objects.select_for_update(nowait=not wait)
                .annotate(expired=Q(expires_at__lte=Now()))
                .get(client=client, key=key)
            )
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) == LOCK_NOT_AVAILABLE:
            return None
        raise


def idempotent(
    *,
    client: ApiClient,
    key: str | None,
    method: str,
    path: str,
    body: bytes,
    work: Callable[[], Answer],
) -> Answer:
    """Answer a POST once per client and key (module docstring): do ``work`` and store its
    answer, or replay the stored one, or refuse (409 in progress, 422 another request)."""
    if key is None:
        return work()
    fingerprint = request_fingerprint(method=method, path=path, body=body)
    inserted = _claim(client=client, key=key, fingerprint=fingerprint)
    if not inserted:
        seen = (
            IdempotencyKey.objects.annotate(expired=Q(expires_at__lte=Now()))
            .filter(client=client, key=key)
            .first()
        )
        if seen is not None and not seen.expired:
            if seen.fingerprint != fingerprint:
                return _other_request(key)
            if seen.state == IdempotencyState.COMPLETED:
                return _replay(seen)
    with transaction.atomic():
        row = _locked(client=client, key=key, wait=inserted)
        if row is None:
            return _in_progress(key)
        if row.expired:  # type: ignore[attr-defined]
            # Forgotten: the key starts afresh, as this request's.
            IdempotencyKey.objects.filter(pk=row.pk).update(
                fingerprint=fingerprint,
                state=IdempotencyState.IN_PROGRESS,
                response_status=None,
                response_body="",
                claimed_at=Now(),
                expires_at=Now() + timedelta(seconds=settings.API_IDEMPOTENCY_TTL_SECONDS),
                completed_at=None,
            )
        elif row.fingerprint != fingerprint:
            return _other_request(key)
        elif row.state == IdempotencyState.COMPLETED:
            return _replay(row)
        answer = work()
        IdempotencyKey.objects.filter(pk=row.pk).update(
            state=IdempotencyState.COMPLETED,
            response_status=answer.status,
            response_body=answer.body,
            completed_at=Now(),
        )
    return answer


def _replay(row: IdempotencyKey) -> Answer:
    # A completed row has its response (a check constraint).
    return Answer(row.response_status or 500, row.response_body, replayed=True)


def _other_request(key: str) -> Answer:
    return problem(
        422,
        f"{HEADER} {key!r} was used for another request (another method, path or body): a "
        "retry must send exactly what the first request sent; a new request needs a new key",
    )


def _in_progress(key: str) -> Answer:
    return problem(
        409,
        f"a request with {HEADER} {key!r} is still being answered; send it again in a moment "
        "to get its answer",
    )
