"""docs/design.md §2, row by row: what a call saw → its outcome. Pure: no database."""

from __future__ import annotations

import pytest

from journal.outcomes import Interrupted, NotSent, Reply, StepState, classify


@pytest.mark.parametrize("status", [200, 201, 202, 204])
def test_2xx_is_done_with_evidence(status: int) -> None:
    outcome = classify(Reply(status, evidence={"id": "pi_123"}), earlier_attempt=False)
    assert outcome.state == StepState.DONE
    assert outcome.data["evidence"] == {"id": "pi_123"}


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, "parameter_invalid"),
        (401, "authentication"),
        (402, "card_declined"),
        (403, ""),
        (404, "resource_missing"),
        (422, ""),
    ],
)
def test_refusal_4xx_is_not_done_with_proof(status: int, code: str) -> None:
    outcome = classify(Reply(status, code=code, message="no"), earlier_attempt=True)
    assert outcome.state == StepState.NOT_DONE
    assert outcome.data["status"] == status
    assert str(status) in outcome.data["proof"]


def test_idempotency_error_is_unknown_and_flagged_as_a_bug() -> None:
    outcome = classify(Reply(400, code="idempotency_error"), earlier_attempt=True)
    assert outcome.state == StepState.UNKNOWN
    assert outcome.data["bug"] is True


@pytest.mark.parametrize("status", [409, 429])
def test_409_and_429_are_unknown(status: int) -> None:
    assert classify(Reply(status), earlier_attempt=False).state == StepState.UNKNOWN


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_5xx_is_unknown(status: int) -> None:
    assert classify(Reply(status), earlier_attempt=False).state == StepState.UNKNOWN


@pytest.mark.parametrize("error", ["ConnectionRefusedError", "gaierror"])
def test_not_sent_on_a_first_attempt_is_not_done(error: str) -> None:
    outcome = classify(NotSent(error), earlier_attempt=False)
    assert outcome.state == StepState.NOT_DONE
    assert error in outcome.data["proof"]


def test_not_sent_after_an_earlier_attempt_is_unknown() -> None:
    # The earlier attempt may have reached the provider; this refusal proves nothing about it.
    assert classify(NotSent("ConnectionRefusedError"), earlier_attempt=True).state == (
        StepState.UNKNOWN
    )


@pytest.mark.parametrize(
    "error", ["ReadTimeout", "ConnectionResetError", "WorkerKilled", "ValueError"]
)
def test_timeouts_resets_and_anything_else_are_unknown(error: str) -> None:
    outcome = classify(Interrupted(error, "boom"), earlier_attempt=False)
    assert outcome.state == StepState.UNKNOWN
    assert outcome.data["error_class"] == error
    assert "failed" not in outcome.detail
