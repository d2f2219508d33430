"""Three states, never two (docs/design.md §2).

A tool reports what its call *saw* as an :data:`Observation`; :func:`classify` — never the
model, never the tool — turns it into an :class:`Outcome`. This module is pure: no database,
no vendor code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import models


class StepState(models.TextChoices):
    PENDING = "pending", "in flight"
    """Recorded and an attempt started; no outcome yet. If its runner died, it is unknown."""
    DONE = "done", "done"
    """It happened. Carries evidence: the provider's id for the effect."""
    NOT_DONE = "not_done", "not done"
    """It certainly did not happen. Carries the proof: which refusal."""
    UNKNOWN = "unknown", "unknown"
    """It may have happened. Carries why, and is being looked up or waits for a human."""


LIVE_STATES = (StepState.PENDING, StepState.UNKNOWN)
SETTLED_STATES = (StepState.DONE, StepState.NOT_DONE)


# --- What a call saw ------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """The provider answered with an HTTP status (``code`` is its machine error code)."""

    status: int
    evidence: Mapping[str, Any] = field(default_factory=dict)
    code: str = ""
    message: str = ""


@dataclass(frozen=True)
class NotSent:
    """The request provably never left: connection refused, or the name did not resolve."""

    error_class: str
    message: str = ""


@dataclass(frozen=True)
class Interrupted:
    """Anything else: a timeout, a reset after sending, an unexpected exception."""

    error_class: str
    message: str = ""


Observation = Reply | NotSent | Interrupted

# Stripe's code for "this key was already used with other arguments".
IDEMPOTENCY_MISMATCH_CODES = frozenset({"idempotency_error"})

# Refusals of *us*, not of the action: our key is wrong or revoked (401), not allowed (403),
# the request reached a server that is not the provider's (421). A 404 is ours too, unless
# the provider says which object of the request it does not know (Stripe's
# ``resource_missing``): a 404 from the endpoint itself means the address is wrong.
MISCONFIGURED_STATUSES = frozenset({401, 403, 421})
OBJECT_MISSING_CODES = frozenset({"resource_missing"})
# Never sent because of something that will not pass by itself: a name that does not resolve,
# a certificate that does not verify, a header that cannot be written as HTTP. Retried like
# any request that never left, then, if it persists, our side is misconfigured.
PERSISTENT_NOT_SENT = frozenset(
    {"NameResolutionError", "gaierror", "SSLCertVerificationError", "InvalidURL", "InvalidHeader"}
)


@dataclass(frozen=True)
class Outcome:
    """The harness's verdict on an attempt: a state, a sentence, and the facts behind it."""

    state: StepState
    detail: str
    data: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def done(cls, evidence: Mapping[str, Any], detail: str = "") -> Outcome:
        return cls(StepState.DONE, detail or "done", {"evidence": dict(evidence)})

    @classmethod
    def not_done(cls, proof: str, **facts: Any) -> Outcome:
        return cls(StepState.NOT_DONE, proof, {"proof": proof, **facts})

    @classmethod
    def unknown(cls, reason: str, **facts: Any) -> Outcome:
        return cls(StepState.UNKNOWN, reason, {"reason": reason, **facts})


def evidence_missing(evidence: Any, names: Sequence[str]) -> list[str]:
    """Which of the evidence ``names`` a tool declares a done effect must carry are absent
    (or empty) in ``evidence``: done needs evidence (docs/design.md §2)."""
    if not isinstance(evidence, Mapping):
        return list(names)
    return [name for name in names if evidence.get(name) in (None, "", [], {})]


def proven(outcome: Outcome, names: Sequence[str]) -> Outcome:
    """``outcome`` as it stands, unless it says ``done`` without the evidence ``names``: then
    it proves nothing, and the effect, which may have happened, is ``unknown``."""
    if outcome.state != StepState.DONE:
        return outcome
    missing = evidence_missing(outcome.data.get("evidence"), names)
    if not missing:
        return outcome
    return Outcome.unknown(
        f"the provider said it was done without the {', '.join(missing)} that would prove it; "
        "it may have happened",
        missing=missing,
    )


def classify(
    observation: Observation, *, earlier_attempt: bool, evidence: Sequence[str] = ()
) -> Outcome:
    """Classify one call by the table of docs/design.md §2. When in doubt, ``unknown``.

    ``earlier_attempt`` says whether any earlier attempt of the same step exists: a refused
    connection proves nothing about an earlier attempt that may have reached the provider.
    ``evidence`` names what a 2xx must carry to be ``done`` (the tool's ``evidence``): a 2xx
    without it (an empty body, another shape, a proxy's HTML page) is ``unknown``.
    """
    match observation:
        case Reply(status=status, evidence=found) if 200 <= status < 300:
            missing = evidence_missing(found, evidence)
            if missing:
                return Outcome.unknown(
                    f"the provider answered HTTP {status} without the {', '.join(missing)} "
                    "that would prove it acted; it may have processed the request",
                    status=status,
                    missing=missing,
                )
            return Outcome.done(found, f"the provider accepted it (HTTP {status})")
        case Reply(status=400, code=code, message=message) if code in IDEMPOTENCY_MISMATCH_CODES:
            # Arguments are frozen, so this is our bug; the first use of the key may have acted.
            return Outcome.unknown(
                "the provider says this key was already used with other arguments; the first "
                "use may have acted",
                status=400,
                code=code,
                message=message,
                bug=True,
            )
        case Reply(status=status, code=code, message=message) if (
            status in MISCONFIGURED_STATUSES or (status == 404 and code not in OBJECT_MISSING_CODES)
        ) and earlier_attempt:
            # Refused before the provider's idempotency layer (its authentication, its
            # routing, a proxy): it says nothing about the earlier attempt, which may have
            # landed. A person must fix our side; the step stays open for a lookup after.
            return Outcome.unknown(
                f"the provider refused our retry, not the action (HTTP {status}"
                + (f" {code}" if code else "")
                + "), and an earlier attempt may have acted; our side is misconfigured (a "
                "key, an address)",
                status=status,
                code=code,
                message=message,
                misconfigured=True,
            )
        case Reply(status=status, code=code, message=message) if status in (
            MISCONFIGURED_STATUSES
        ) or (status == 404 and code not in OBJECT_MISSING_CODES):
            return Outcome.not_done(
                f"the provider refused our request, not the action (HTTP {status}"
                + (f" {code}" if code else "")
                + (f": {message}" if message else "")
                + "); nothing happened; our side is misconfigured (a key, an address)",
                status=status,
                code=code,
                misconfigured=True,
            )
        case Reply(status=status, code=code, message=message) if (
            400 <= status < 500 and status not in (409, 429)
        ):
            return Outcome.not_done(
                f"the provider refused it (HTTP {status}{' ' + code if code else ''})"
                + (f": {message}" if message else ""),
                status=status,
                code=code,
            )
        case Reply(status=status, code=code, message=message):
            return Outcome.unknown(
                f"the provider answered HTTP {status}{' ' + code if code else ''}; it may have "
                "processed the request",
                status=status,
                code=code,
                message=message,
            )
        case NotSent(error_class=error_class, message=message) if not earlier_attempt:
            # True, and passing: the provider was unreachable. Worth another attempt later.
            return Outcome.not_done(
                f"the request was never sent ({error_class})",
                error_class=error_class,
                message=message,
                transient=True,
                **({"misconfigured": True} if error_class in PERSISTENT_NOT_SENT else {}),
            )
        case NotSent(error_class=error_class, message=message):
            return Outcome.unknown(
                f"the provider could not be reached ({error_class}), and an earlier attempt "
                "may have reached it",
                error_class=error_class,
                message=message,
            )
        case Interrupted(error_class=error_class, message=message):
            return Outcome.unknown(
                f"the call was interrupted ({error_class}); the provider may have processed it",
                error_class=error_class,
                message=message,
            )
    raise TypeError(f"not an observation: {observation!r}")  # pragma: no cover
