"""The rules the task's and the step's CHECK constraints held, now in their triggers
(docs/design.md §14: PostgreSQL reads and plans a CHECK constraint again at every statement;
a trigger's expressions once a session). Each is refused as the constraint refused it (a
check violation, with the constraint's name), as the app's role and as the owner; the lists
the triggers hold are the Python enums'; and no trigger changes the row it checks, which is
what lets a rule be asked only of the writes that name its columns (UPDATE OF)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

from journal.leases import lease_acquire
from journal.models import Step, Task, TaskStatus
from journal.outcomes import StepState
from journal.record import step_record, task_create
from journal.sqlfiles import sql_newest
from tests.databases import owner_connection
from tests.journal.support import ChargeTool, Provider, charge, invoice

pytestmark = pytest.mark.usefixtures("committed")


@contextlib.contextmanager
def _raw(as_owner: bool) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """A plain psycopg connection in autocommit: the app's credentials or the owner's."""
    which = owner_connection() if as_owner else connection
    with psycopg.connect(**which.get_connection_params(), autocommit=True) as conn:
        yield conn


def _pending_step() -> Step:
    task = task_create(kind="renewal", goal="charge the invoice")
    lease = lease_acquire(task_id=task.pk, owner="t")
    assert lease is not None
    return step_record(
        lease=lease, decision=charge(invoice()), tools={"charge": ChargeTool(Provider())}
    )


TASK_WRITES = {
    "a status that is none": ("status = 'paused'", "journal_task_status_valid"),
    "waiting with no time to wake": (
        "status = 'waiting', wake_at = NULL",
        "journal_task_waiting_has_wake_at",
    ),
    "in front of a person with no code": (
        "status = 'needs_human', attention = 'why', attention_code = ''",
        "journal_task_attention_has_code",
    ),
    "a negative step count": ("step_count = -1", "journal_task_counts_not_negative"),
    "a negative count of failed runs": ("failed_runs = -1", "journal_task_counts_not_negative"),
}


@pytest.mark.parametrize("write", sorted(TASK_WRITES))
@pytest.mark.parametrize("as_owner", [False, True], ids=["app", "owner"])
def test_a_task_is_held_to_what_its_constraints_said(write: str, as_owner: bool) -> None:
    task = task_create(kind="renewal", goal="renew")
    before = Task.objects.filter(pk=task.pk).values().get()
    assignments, constraint = TASK_WRITES[write]
    with _raw(as_owner) as conn, pytest.raises(psycopg.errors.CheckViolation) as refused:
        conn.execute(
            f"UPDATE journal_task SET {assignments} WHERE id = %s",  # noqa: S608 - a constant
            [task.pk],
        )
    assert refused.value.diag.constraint_name == constraint
    assert Task.objects.filter(pk=task.pk).values().get() == before


STEP_WRITES = {
    "a state that is none": ("state = 'lost'", "journal_step_state_valid"),
    "done and not settled": ("state = 'done'", "journal_step_settled_at_iff_settled"),
    "settled and still pending": ("settled_at = now()", "journal_step_settled_at_iff_settled"),
    "a negative count of attempts": ("attempts = -1", "journal_step_counts_not_negative"),
    "a negative count of lookups": ("lookups = -1", "journal_step_counts_not_negative"),
}


@pytest.mark.parametrize("write", sorted(STEP_WRITES))
@pytest.mark.parametrize("as_owner", [False, True], ids=["app", "owner"])
def test_a_step_is_held_to_what_its_constraints_said(write: str, as_owner: bool) -> None:
    step = _pending_step()
    before = Step.objects.filter(pk=step.pk).values().get()
    assignments, constraint = STEP_WRITES[write]
    with _raw(as_owner) as conn, pytest.raises(psycopg.errors.CheckViolation) as refused:
        conn.execute(
            f"UPDATE journal_step SET {assignments} WHERE id = %s",  # noqa: S608 - a constant
            [step.pk],
        )
    assert refused.value.diag.constraint_name == constraint
    assert Step.objects.filter(pk=step.pk).values().get() == before


@pytest.mark.parametrize("as_owner", [False, True], ids=["app", "owner"])
def test_a_refusal_is_born_settled(as_owner: bool) -> None:
    """A step recorded not_done (a refusal) carries the moment it was settled: the birth rule
    says so now, as settled_at_iff_settled did."""
    task = task_create(kind="renewal", goal="renew")
    with _raw(as_owner) as conn:
        conn.execute(
            """
            UPDATE journal_task
               SET lease_owner = 'foothold', lease_token = lease_token + 1,
                   lease_taken_at = now(), lease_expires_at = now() + interval '1 minute',
                   step_count = step_count + 1, version = version + 1
             WHERE id = %s
            """,
            [task.pk],
        )
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="is a refusal"):
            conn.execute(
                """
                INSERT INTO journal_step (task_id, n, kind, tool, args, key, cost, once, retries,
                    refusal, undo_tool, state, detail, outcome, attempts, lookups, decision,
                    created_at, settled_at)
                SELECT id, step_count, 'call', 'charge', '{}'::jsonb,
                       journal_step_key(p_task => id, p_n => step_count), 'full', false, 0,
                       'invalid_arguments', '', 'not_done', 'refused', '{}'::jsonb, 0, 0,
                       '{}'::jsonb, now(), NULL
                  FROM journal_task WHERE id = %s
                """,
                [task.pk],
            )
    assert not Step.objects.filter(task=task).exists()


def _quoted_list(name: str, after: str) -> list[str]:
    text = sql_newest()[name].text
    match = re.search(after + r"\s*\((.*?)\)", text, re.DOTALL)
    assert match is not None, f"{name}: no list after {after!r}"
    return re.findall(r"'(\w+)'", match[1])


def test_the_triggers_lists_are_the_enums() -> None:
    assert _quoted_list("journal_task_rules", "NEW.status NOT IN") == TaskStatus.values
    assert sorted(_quoted_list("journal_step_moves", "NEW.state NOT IN")) == sorted(
        StepState.values
    )


def test_no_trigger_changes_the_row_it_checks() -> None:
    """Every trigger on the journal returns the row as written (or refuses it): so a rule on
    some columns is asked only of a write that names them (BEFORE UPDATE OF), and no other
    trigger can change them behind its back."""
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
