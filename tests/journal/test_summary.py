"""What a finished task says of itself (journal/summary.py): from its facts alone."""

from __future__ import annotations

from journal.outcomes import StepState
from journal.protocols import StepFact
from journal.summary import fell_short


def fact(n: int, state: StepState, *, transient: bool = False, retries: int = 0) -> StepFact:
    return StepFact(
        n=n,
        tool="charge_customer",
        args={"invoice": "INV-1"},
        state=state,
        detail="",
        key=f"k{n}",
        transient=transient,
        retries=retries,
    )


def test_a_task_fell_short_only_of_a_call_that_did_not_happen_never_of_an_unknown_one() -> None:
    assert fell_short([fact(1, StepState.DONE)]) is False
    assert fell_short([fact(1, StepState.DONE), fact(2, StepState.NOT_DONE)]) is True
    # Not known to have happened is not "failed": it may have.
    assert fell_short([fact(1, StepState.UNKNOWN)]) is False
    # A passing failure that a retry stands for is not a shortfall.
    retried = [fact(1, StepState.NOT_DONE, transient=True), fact(2, StepState.DONE, retries=1)]
    assert fell_short(retried) is False


def test_an_app_s_own_evidence_names_its_effect() -> None:
    from journal.summary import evidence_label

    assert evidence_label({"credit": "cr_1", "status": "issued"}) == "credit cr_1"
    assert evidence_label({"charge": "ch_1", "credit": "cr_1"}) == "charge ch_1"
    assert evidence_label({"credit": None}) == "no evidence recorded"
