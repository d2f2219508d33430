"""The journal's functions hold their own rules (docs/design.md §4): what the retired triggers
checked of every write is now each move's precondition, asked of the arguments it is given.
A worker's role may call these moves: here each is asked for what no move may do, and
refuses with nothing written."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import DatabaseError, connection

from journal.calls import call
from journal.leases import Lease, lease_acquire, lease_call
from journal.models import Entry, Step, Task
from journal.outcomes import Outcome
from journal.record import step_record, task_create
from journal.settle import step_settle
from journal.sqlfiles import sql_newest
from tests.journal.support import ChargeTool, Provider, charge, invoice

pytestmark = pytest.mark.usefixtures("committed")

TOOLS = {"charge": ChargeTool(Provider(), compensation="refund"), "refund": ChargeTool(Provider())}


def _held() -> tuple[Lease, Step]:
    task = task_create(kind="renewal", goal="charge the invoice")
    lease = lease_acquire(task_id=task.pk, owner="t")
    assert lease is not None
    return lease, step_record(lease=lease, decision=charge(invoice()), tools=TOOLS)


def _written(task_id: Any) -> tuple[Any, ...]:
    task = Task.objects.get(pk=task_id)
    steps = list(Step.objects.filter(task_id=task_id).values_list("id", "state", "outcome"))
    return task.status, task.step_count, steps, Entry.objects.filter(task_id=task_id).count()


RECORDS: dict[str, tuple[dict[str, Any], str]] = {
    "a refusal that carries evidence": (
        {
            "refusal": "invalid_arguments",
            "detail": "no",
            "outcome": {"evidence": {"id": "x"}},
            "entry_kind": "decision_rejected",
        },
        "no evidence",
    ),
    "a refusal with no sentence": (
        {"refusal": "invalid_arguments", "detail": "", "entry_kind": "decision_rejected"},
        "its sentence",
    ),
    "a pending step entered as refused": ({"entry_kind": "guard_refused"}, "recorded"),
    "a key of its own choosing": ({"key": "ao:someone-else:1"}, "key is its own"),
    "an undo of a step it does not undo": ({"offsets": 1, "key": None}, "not a done step"),
    "negative retries": ({"retries": -1}, "never negative"),
}


@pytest.mark.parametrize("case", list(RECORDS))
def test_a_record_is_born_only_as_a_step_is_born(case: str) -> None:
    lease, step = _held()
    given, refused = RECORDS[case]
    before = _written(lease.task_id)
    params: dict[str, Any] = {"tool": "charge", "args": {}, "decision": {}, "entry": {}, **given}
    with pytest.raises(DatabaseError, match=refused):
        lease_call(lease, "journal_record", **params)
    assert _written(lease.task_id) == before


SETTLEMENTS: dict[str, tuple[dict[str, Any], str]] = {
    "a state that is not a settlement": ({"state": "unknown", "outcome": {}}, "done or not_done"),
    "done without evidence": ({"state": "done", "outcome": {}}, "carries its evidence"),
    "a person's word passed off as a provider's": (
        {"state": "done", "outcome": {"evidence": {"id": "x"}}, "via": "operator"},
        "journal_step_resolve",
    ),
    "a note that says the step settled": (
        {
            "state": "done",
            "outcome": {"evidence": {"id": "x"}},
            "notes": [{"kind": "step_settled", "data": {}}],
        },
        "a note about step",
    ),
}


@pytest.mark.parametrize("case", list(SETTLEMENTS))
def test_a_settlement_is_a_settlement(case: str) -> None:
    lease, step = _held()
    given, refused = SETTLEMENTS[case]
    before = _written(lease.task_id)
    params: dict[str, Any] = {"step": step.pk, "detail": "", "entry": {}, "via": "webhook", **given}
    with pytest.raises(DatabaseError, match=refused):
        call("journal_settle", **params)
    assert _written(lease.task_id) == before


def test_an_unknown_step_carries_no_evidence_and_a_finish_ends_only_so() -> None:
    lease, step = _held()
    before = _written(lease.task_id)
    with pytest.raises(DatabaseError, match="no evidence"):
        lease_call(
            lease,
            "journal_mark_unknown",
            step=step.pk,
            detail="?",
            outcome={"evidence": {"id": "x"}},
            next_check_in=1.0,
        )
    with pytest.raises(DatabaseError, match="finished or compensated"):
        lease_call(
            lease,
            "journal_finish",
            to="cancelled",
            shortfall=False,
            detail="",
            outcome={"evidence": {}},
            decision={},
            entry={},
        )
    with pytest.raises(DatabaseError, match="unwinds ends compensated"):
        lease_call(
            lease,
            "journal_finish",
            to="compensated",
            shortfall=False,
            detail="",
            outcome={"evidence": {}},
            decision={},
            entry={},
        )
    assert _written(lease.task_id) == before


def test_a_settled_step_keeps_its_outcome_whatever_is_reported_after() -> None:
    lease, step = _held()
    step_settle(step_id=step.pk, outcome=Outcome.done({"id": "pi_1"}), via="attempt", lease=lease)
    row = lease_call(
        lease,
        "journal_mark_unknown",
        step=step.pk,
        detail="timed out",
        outcome={},
        next_check_in=1.0,
    )
    assert row.changed is False
    assert lease_call(lease, "journal_attempt_start", step=step.pk).attempt is None
    assert not step_settle(step_id=step.pk, outcome=Outcome.not_done("no"), via="webhook")
    fresh = Step.objects.get(pk=step.pk)
    assert (fresh.state, fresh.evidence, fresh.attempts) == ("done", {"id": "pi_1"}, 1)


def test_a_note_on_a_task_is_never_one_of_the_journals_own_moves() -> None:
    task = task_create(kind="renewal", goal="g")
    for action in ("resume", "cancel", "compensate", "reconcile", "resolve", "correct", ""):
        with pytest.raises(DatabaseError, match="a note names an action of its own"):
            call("journal_note", task=task.pk, actor="x", action=action)
    call("journal_note", task=task.pk, actor="x", action="called the customer", data={"n": 1})
    note = Entry.objects.filter(task=task, kind="operator_action").get()
    assert note.data == {"action": "called the customer", "n": 1}


def test_no_trigger_changes_the_row_it_checks() -> None:
    """The one trigger left on the journal (the guards' claims, journal_step_claims) returns
    the row as written: it keeps the claims beside the steps and never changes a step."""
    assigned = re.compile(r"\b(NEW|OLD)\.\w+\s*:=")
    for name, file in sql_newest().items():
        assert not assigned.search(file.text), f"{name} changes the row it checks"


def test_the_hot_tables_carry_no_check_constraint() -> None:
    """Neither a model's constraint nor a field's (a PositiveIntegerField's ``>= 0``) comes
    back: PostgreSQL would read and plan it again at every write of a step (§14)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT conrelid::regclass::text, conname FROM pg_constraint
             WHERE contype = 'c' AND conrelid IN ('journal_task'::regclass,
                                                  'journal_step'::regclass,
                                                  'journal_entry'::regclass)
            """
        )
        assert cursor.fetchall() == []
