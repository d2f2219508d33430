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
    outcome = classify(Reply(status, code=code, message="no"), earlier_attempt=False)
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


@pytest.mark.parametrize(
    ("status", "code", "ours"),
    [
        (401, "authentication_error", True),
        (403, "", True),
        (421, "misdirected_request", True),
        (404, "", True),  # the endpoint itself is not there: a wrong address
        (404, "resource_missing", False),  # an object the request names is not there
        (402, "card_declined", False),
        (400, "parameter_invalid", False),
    ],
)
def test_a_refusal_of_us_is_told_apart_from_a_refusal_of_the_action(
    status: int, code: str, ours: bool
) -> None:
    outcome = classify(Reply(status, code=code), earlier_attempt=False)
    assert outcome.state == StepState.NOT_DONE
    assert bool(outcome.data.get("misconfigured")) is ours


@pytest.mark.parametrize(
    "evidence", [{}, {"id": None}, {"id": ""}, {"other": "x"}, {"data": [1, 2]}]
)
def test_2xx_without_the_evidence_the_tool_names_is_unknown(evidence: dict[str, object]) -> None:
    outcome = classify(Reply(200, evidence=evidence), earlier_attempt=False, evidence=("id",))
    assert outcome.state == StepState.UNKNOWN
    assert outcome.data["missing"] == ["id"]
    assert classify(
        Reply(200, evidence={"id": "x"}), earlier_attempt=False, evidence=("id",)
    ).state == (StepState.DONE)


@pytest.mark.parametrize(
    ("error", "ours"),
    [
        ("NameResolutionError", True),
        ("SSLCertVerificationError", True),
        ("ConnectionRefusedError", False),
    ],
)
def test_a_request_never_sent_for_a_lasting_reason_is_marked_ours(error: str, ours: bool) -> None:
    outcome = classify(NotSent(error), earlier_attempt=False)
    assert outcome.state == StepState.NOT_DONE and outcome.data["transient"] is True
    assert bool(outcome.data.get("misconfigured")) is ours


@pytest.mark.parametrize(("status", "code"), [(401, ""), (403, ""), (421, ""), (404, "")])
def test_a_refusal_of_our_retry_proves_nothing_about_the_earlier_attempt(
    status: int, code: str
) -> None:
    """Refused before the provider's idempotency layer (authentication, routing, a proxy):
    the earlier attempt may have landed."""
    outcome = classify(Reply(status, code=code), earlier_attempt=True)
    assert outcome.state == StepState.UNKNOWN
    assert outcome.data["misconfigured"] is True


@pytest.mark.parametrize(("status", "code"), [(402, "card_declined"), (404, "resource_missing")])
def test_a_refusal_of_the_action_on_a_retry_is_still_not_done(status: int, code: str) -> None:
    """Answered by the provider itself, behind its idempotency layer: the key's first use, if
    it had landed, would have been replayed instead."""
    assert classify(Reply(status, code=code), earlier_attempt=True).state == StepState.NOT_DONE
