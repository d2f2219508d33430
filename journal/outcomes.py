"""Three states, never two (docs/design.md §2).

A tool reports what its call *saw* as an :data:`Observation`; :func:`classify` — never the
model, never the tool — turns it into an :class:`Outcome`. This module is pure: no database,
no vendor code.
"""

from __future__ import annotations

from collections.abc import Mapping
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


def classify(observation: Observation, *, earlier_attempt: bool) -> Outcome:
    """Classify one call by the table of docs/design.md §2. When in doubt, ``unknown``.

    ``earlier_attempt`` says whether any earlier attempt of the same step exists: a refused
    connection proves nothing about an earlier attempt that may have reached the provider.
    """
    match observation:
        case Reply(status=status, evidence=evidence) if 200 <= status < 300:
            return Outcome.done(evidence, f"the provider accepted it (HTTP {status})")
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
