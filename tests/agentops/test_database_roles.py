"""Whoever holds the app's database credentials cannot rewrite the journal (issue 8).

Every attempt is made the way an attacker with DATABASE_URL would: a plain psycopg
connection as the app's role, autocommit, raw SQL. The suite itself runs as that role too
(tests/conftest.py), so everything else in it shows the app works with these privileges.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

from agentops.dbroles import ALL, APP_COLUMNS
from journal.leases import lease_acquire
from journal.models import Entry, Step, Task
from journal.outcomes import Outcome
from journal.record import step_record, task_create
from journal.settle import step_settle
from tests.databases import owner_connection
from tests.journal.support import ChargeTool, Provider, charge, invoice

pytestmark = pytest.mark.usefixtures("committed")

Refused = (psycopg.errors.InsufficientPrivilege, psycopg.errors.RaiseException)


def _settled_step() -> Step:
    task = task_create(kind="renewal", goal="charge the invoice", refs={"invoice": invoice()})
    lease = lease_acquire(task_id=task.pk, owner="t")
    assert lease is not None
    step = step_record(
        lease=lease, decision=charge(invoice()), tools={"charge": ChargeTool(Provider())}
    )
    step_settle(step_id=step.pk, outcome=Outcome.done({"id": "pi_real"}), via="test", lease=lease)
    return Step.objects.get(pk=step.pk)


@pytest.fixture
def app_sql() -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """A fresh connection with the app's own credentials, as an attacker would open it."""
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as conn:
        yield conn


def test_the_suite_runs_as_a_role_that_owns_nothing(
    app_sql: psycopg.Connection[tuple[object, ...]],
) -> None:
    role, superuser = app_sql.execute(
        "SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user"
    ).fetchone() or ("", True)
    assert owner_connection().settings_dict["USER"] != role, "set DATABASE_OWNER_URL"
    assert superuser is False
    owned = app_sql.execute(
        "SELECT count(*) FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner "
        "WHERE r.rolname = current_user"
    ).fetchone()
    assert owned == (0,)


@pytest.mark.parametrize(
    "assignment",
    [
        'outcome = \'{"evidence": {"id": "pi_forged"}}\'::jsonb',
        "detail = 'never charged'",
        "settled_at = now() - interval '1 day'",
        "decision = '{}'::jsonb",
        "attempts = 0",
    ],
)
def test_a_settled_step_cannot_be_rewritten(
    app_sql: psycopg.Connection[tuple[object, ...]], assignment: str
) -> None:
    step = _settled_step()
    with pytest.raises(Refused):
        app_sql.execute(f"UPDATE journal_step SET {assignment} WHERE id = %s", [step.pk])  # noqa: S608
    assert Step.objects.get(pk=step.pk).outcome == step.outcome == {"evidence": {"id": "pi_real"}}
    assert Step.objects.get(pk=step.pk).settled_at == step.settled_at


@pytest.mark.parametrize(
    "assignment",
    ["goal = 'refund everyone'", 'refs = \'{"invoice": "INV-other", "amount": 999999}\'::jsonb'],
)
def test_a_task_goal_and_refs_cannot_be_rewritten(
    app_sql: psycopg.Connection[tuple[object, ...]], assignment: str
) -> None:
    task = task_create(kind="renewal", goal="charge INV", refs={"invoice": "INV-1", "amount": 49})
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        app_sql.execute(f"UPDATE journal_task SET {assignment} WHERE id = %s", [task.pk])  # noqa: S608
    fresh = Task.objects.get(pk=task.pk)
    assert (fresh.goal, fresh.refs) == ("charge INV", {"invoice": "INV-1", "amount": 49})


def test_the_freeze_holds_even_for_the_owner_of_the_tables() -> None:
    """Column privileges stop the app role; the triggers stop everyone short of disabling
    them, which only the owner can do (and the app never connects as the owner)."""
    step = _settled_step()
    task = Task.objects.get(pk=step.task_id)
    owner = owner_connection()
    params = owner.get_connection_params()
    with psycopg.connect(**params, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="frozen"):
            conn.execute("UPDATE journal_step SET detail = 'x' WHERE id = %s", [step.pk])
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="frozen"):
            conn.execute(
                "UPDATE journal_task SET refs = %s::jsonb WHERE id = %s",
                [json.dumps({"invoice": "INV-x"}), task.pk],
            )
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="never deleted"):
            conn.execute("DELETE FROM journal_task WHERE id = %s", [task.pk])


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM journal_entry WHERE task_id = %s",
        "DELETE FROM journal_step WHERE task_id = %s",
        "DELETE FROM journal_task WHERE id = %s",
        "UPDATE journal_entry SET data = '{}'::jsonb WHERE task_id = %s",
    ],
)
def test_the_app_role_may_not_delete_or_edit_entries(
    app_sql: psycopg.Connection[tuple[object, ...]], sql: str
) -> None:
    step = _settled_step()
    before = Entry.objects.filter(task_id=step.task_id).count()
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        app_sql.execute(sql, [step.task_id])
    assert Entry.objects.filter(task_id=step.task_id).count() == before


@pytest.mark.parametrize(
    "sql",
    [
        # The replication role skips ordinary triggers: superusers only.
        "SET session_replication_role = replica",
        # Disabling a trigger needs the table's owner.
        "ALTER TABLE journal_entry DISABLE TRIGGER journal_entry_no_update_or_delete",
        "ALTER TABLE journal_step DISABLE TRIGGER USER",
        "ALTER TABLE journal_task DISABLE TRIGGER ALL",
        "DROP TRIGGER journal_step_settled_frozen ON journal_step",
        "TRUNCATE journal_entry, journal_step, journal_task",
        "CREATE TABLE public.agentops_shadow (id int)",
        # Nor can it become the owner, or take the tables over.
        "SET ROLE {owner}",
        "ALTER TABLE journal_entry OWNER TO CURRENT_USER",
    ],
)
def test_the_app_role_cannot_switch_the_rules_off(
    app_sql: psycopg.Connection[tuple[object, ...]], sql: str
) -> None:
    _settled_step()
    owner = owner_connection().settings_dict["USER"]
    with pytest.raises((psycopg.errors.InsufficientPrivilege, psycopg.errors.WrongObjectType)):
        app_sql.execute(sql.format(owner=owner))


def test_with_the_rules_still_on_a_delete_after_a_failed_switch_is_refused(
    app_sql: psycopg.Connection[tuple[object, ...]],
) -> None:
    step = _settled_step()
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        app_sql.execute("SET session_replication_role = replica")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        app_sql.execute("DELETE FROM journal_entry WHERE task_id = %s", [step.task_id])


def test_the_app_role_may_update_exactly_the_listed_columns(
    app_sql: psycopg.Connection[tuple[object, ...]],
) -> None:
    granted: dict[str, set[str]] = {}
    rows = app_sql.execute(
        """
        SELECT table_name, column_name FROM information_schema.column_privileges
         WHERE grantee = current_user AND privilege_type = 'UPDATE'
           AND (table_name LIKE 'journal\\_%' OR table_name LIKE 'agentops\\_%')
        """
    ).fetchall()
    for table, column in rows:
        granted.setdefault(str(table), set()).add(str(column))
    expected = {
        table: set(columns.updatable)
        for table, columns in APP_COLUMNS.items()
        if columns.updatable and columns.frozen != ALL
    }
    assert granted == expected
