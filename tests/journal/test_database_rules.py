"""What PostgreSQL itself holds, whatever the app's code does (docs/design.md §4).

No app role writes a journal table: every write is one of the journal's functions, which
make only their own moves. So these tests try raw writes as the app's role, on a plain
psycopg connection as an attacker with DATABASE_URL would, and are refused by privilege;
and they ask the functions for what they must not do. The owner of the tables is trusted
(it could switch any rule off): nothing here holds against it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

from journal.leases import lease_acquire
from journal.models import Entry, EntryKind, Step
from journal.outcomes import Outcome
from journal.record import step_record, task_create
from journal.settle import step_settle
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


@pytest.fixture
def app() -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """A fresh connection with the app's own credentials, autocommit, as an attacker's."""
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as conn:
        yield conn


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE journal_entry SET kind = 'operator_action' WHERE task_id = %s",
        "UPDATE journal_entry SET data = '{}'::jsonb WHERE task_id = %s",
        "DELETE FROM journal_entry WHERE task_id = %s",
        "INSERT INTO journal_entry (task_id, kind, at, actor, data) "
        "VALUES (%s, 'step_settled', now(), 'stripe', '{}')",
        "UPDATE journal_step SET key = 'forged-key' WHERE task_id = %s",
        "UPDATE journal_step SET args = '{\"amount\": 1}'::jsonb WHERE task_id = %s",
        "UPDATE journal_step SET state = 'unknown', settled_at = NULL WHERE task_id = %s",
        "DELETE FROM journal_step WHERE task_id = %s",
        "UPDATE journal_task SET status = 'needs_human' WHERE id = %s",
        "DELETE FROM journal_task WHERE id = %s",
    ],
)
def test_the_app_role_cannot_write_the_journal_in_raw_sql(
    app: psycopg.Connection[tuple[object, ...]], sql: str
) -> None:
    step = _task_with_settled_step()
    before = list(Entry.objects.filter(task_id=step.task_id).values())
    steps = list(Step.objects.filter(task_id=step.task_id).values())
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        app.execute(sql, [step.task_id])
    assert list(Entry.objects.filter(task_id=step.task_id).values()) == before
    assert list(Step.objects.filter(task_id=step.task_id).values()) == steps


def test_the_journal_cannot_be_truncated_by_the_app(
    app: psycopg.Connection[tuple[object, ...]],
) -> None:
    _task_with_settled_step()
    count = Entry.objects.count()
    for table in ("journal_entry", "journal_step", "journal_task", "journal_approval"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            app.execute(f"TRUNCATE {table} CASCADE")
    assert Entry.objects.count() == count


def test_a_done_step_never_moves_back_by_any_function() -> None:
    """A later report the other way is a conflict; the same again changes nothing; neither
    the runner's own settlement nor its marking unknown moves it."""
    step = _task_with_settled_step()
    assert not step_settle(
        step_id=step.pk, outcome=Outcome.not_done("declined"), via="webhook", actor="stripe"
    )
    fresh = Step.objects.get(pk=step.pk)
    assert fresh.state == "done" and fresh.evidence == {"id": "pi_1"}


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
