"""The ``Agentops-Signature`` header, as Stripe signs its webhooks: ``t=<unix time>,v1=<hex>``,
where ``v1`` is HMAC-SHA256, keyed with ``NOTIFY_SECRET``, of ``<t>.<the raw body>``.

A receiver checks it on the raw bytes it received (never on JSON it parsed and dumped again),
refuses a timestamp too far from its clock (a replayed request), and then deduplicates by the
``Idempotency-Key`` header: a retry of the same notification carries the same key and body,
signed again with a new timestamp. :func:`verify` is the reference; docs/operating/notifications.md
has the same in a few lines to copy.
"""

from __future__ import annotations

import hashlib
import hmac
import time

HEADER = "Agentops-Signature"
TOLERANCE_SECONDS = 300


def signature(*, secret: str, body: bytes, timestamp: int) -> str:
    """The header's value for ``body`` signed at ``timestamp``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify(
    *,
    secret: str,
    header: str,
    body: bytes,
    tolerance: float = TOLERANCE_SECONDS,
    now: float | None = None,
) -> bool:
    """Whether ``header`` signs ``body`` with ``secret``, at a time within ``tolerance``
    seconds of ``now``. Several ``v1`` values may be given (while a secret is being rolled):
    one matching is enough."""
    timestamp: int | None = None
    macs: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isdigit():
            timestamp = int(value)
        elif name == "v1":
            macs.append(value)
    if timestamp is None or not macs or not secret:
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance:
        return False
    expected = signature(secret=secret, body=body, timestamp=timestamp).partition("v1=")[2]
    return any(hmac.compare_digest(expected, mac) for mac in macs)
