"""What PostgreSQL itself refuses, whatever the code does (docs/design.md §4).

The triggers hold even against the role that owns the tables, so these tests make their
raw writes as that role (``owner_connection``); what the app's own role cannot even try is
in tests/agentops/test_database_roles.py.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from django.db import DatabaseError, transaction

from journal.leases import lease_acquire
from journal.models import Entry, EntryKind, Step
from journal.outcomes import Outcome
from journal.record import step_record, task_create
from journal.settle import step_settle
from tests.databases import owner_connection
from tests.journal.support import ChargeTool, Provider, charge, invoice

pytestmark = pytest.mark.usefixtures("committed")


def _task_with_settled_step() -> Step:
    task = task_create(kind="renewal", goal="charge the invoice")
    lease = lease_acquire(task_id=task.pk, owner="t")
    assert lease is not None
    tool = ChargeTool(Provider())
    step = step_record(lease=lease, decision=charge(invoice()), tools={"charge": tool})
    step_settle(step_id=step.pk, outcome=Outcome.done({"id": "pi_1"}), via="test", lease=lease)
    return step


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE journal_entry SET kind = 'operator_action' WHERE task_id = %s",
        "UPDATE journal_entry SET data = '{}'::jsonb WHERE task_id = %s",
        "DELETE FROM journal_entry WHERE task_id = %s",
    ],
)
def test_entries_cannot_be_updated_or_deleted_in_raw_sql(sql: str) -> None:
    step = _task_with_settled_step()
    before = list(Entry.objects.filter(task_id=step.task_id).values())
    assert before
    owner = owner_connection()
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(using=owner.alias):
        owner.cursor().execute(sql, [step.task_id])
    assert list(Entry.objects.filter(task_id=step.task_id).values()) == before


def test_entries_cannot_be_truncated() -> None:
    _task_with_settled_step()
    count = Entry.objects.count()
    owner = owner_connection()
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(using=owner.alias):
        owner.cursor().execute("TRUNCATE journal_entry CASCADE")
    assert Entry.objects.count() == count


def test_entries_are_append_only_from_a_plain_psycopg_connection_too() -> None:
    step = _task_with_settled_step()
    params = owner_connection().get_connection_params()
    with (
        psycopg.connect(**params, autocommit=True) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("DELETE FROM journal_entry WHERE task_id = %s", [step.task_id])


@pytest.mark.parametrize(
    ("column", "value"),
    [("key", "'forged-key'"), ("args", "'{\"amount\": 1}'::jsonb"), ("tool", "'refund'")],
)
def test_a_step_identity_is_frozen(column: str, value: str) -> None:
    step = _task_with_settled_step()
    before = (step.key, step.args, step.tool)
    owner = owner_connection()
    with pytest.raises(DatabaseError, match="frozen"), transaction.atomic(using=owner.alias):
        owner.cursor().execute(
            f"UPDATE journal_step SET {column} = {value} WHERE id = %s",  # noqa: S608
            [step.pk],
        )
    fresh = Step.objects.get(pk=step.pk)
    assert (fresh.key, fresh.args, fresh.tool) == before


def test_a_done_step_never_moves_back_even_in_raw_sql() -> None:
    step = _task_with_settled_step()
    owner = owner_connection()
    with pytest.raises(DatabaseError, match="never moves"), transaction.atomic(using=owner.alias):
        owner.cursor().execute(
            "UPDATE journal_step SET state = 'unknown', settled_at = NULL WHERE id = %s",
            [step.pk],
        )
    assert Step.objects.get(pk=step.pk).state == "done"


def test_a_contradicting_report_is_logged_and_changes_nothing() -> None:
    step = _task_with_settled_step()
    changed = step_settle(
        step_id=step.pk, outcome=Outcome.not_done("declined"), via="webhook", actor="stripe"
    )
    assert changed is False
    fresh = Step.objects.select_related("task").get(pk=step.pk)
    assert fresh.state == "done"
    assert fresh.task.status == "needs_human"
    assert Entry.objects.filter(step=step, kind=EntryKind.CONFLICT).count() == 1


def test_a_duplicate_report_changes_nothing() -> None:
    step = _task_with_settled_step()
    entries = Entry.objects.filter(task_id=step.task_id).count()
    assert not step_settle(step_id=step.pk, outcome=Outcome.done({"id": "pi_1"}), via="webhook")
    assert Entry.objects.filter(task_id=step.task_id).count() == entries
    assert Step.objects.get(pk=step.pk).task.status == "runnable"


def test_unknown_task_id_is_not_a_step() -> None:
    assert not Step.objects.filter(task_id=uuid.uuid4()).exists()
