"""Whoever holds the app's database credentials cannot rewrite the journal (issue 8).

Every attempt is made the way an attacker with DATABASE_URL would: a plain psycopg
connection as the app's role, autocommit, raw SQL. The suite itself runs as that role too
(tests/conftest.py), so everything else in it shows the app works with these privileges.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

from agentops.dbroles import ALL, APP_COLUMNS
from agentops.runner import task_start
from commerce.customers.selectors import payment_of
from journal.leases import lease_acquire
from journal.models import Entry, Step, Task
from journal.outcomes import Outcome
from journal.record import step_record, task_create
from journal.run import task_advance
from journal.settle import step_settle
from tests.agentops.test_business_effects import (  # noqa: F401 (world: a fixture)
    charges_of,
    renewal_refs,
    run,
    world,
)
from tests.databases import owner_connection
from tests.journal.support import ChargeTool, Provider, ScriptedPlanner, charge, invoice
from tests.journal.test_sagas import SagaRules
from tests.journal.test_sagas import world as saga_world
from tests.sandbox.fixtures import SandboxHandle

pytestmark = pytest.mark.usefixtures("committed")

Refused = (psycopg.errors.InsufficientPrivilege, psycopg.errors.RaiseException)
DECLINED = "pm_card_chargeDeclined"


def _settled_step(undo: str | None = None) -> Step:
    task = task_create(kind="renewal", goal="charge the invoice", refs={"invoice": invoice()})
    lease = lease_acquire(task_id=task.pk, owner="t")
    assert lease is not None
    tool = ChargeTool(Provider(), compensation=undo)
    step = step_record(lease=lease, decision=charge(invoice()), tools={"charge": tool})
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


# --- Issue 15: what a foothold with these credentials tried, refused at business level ------


def _paid_renewal(inv: str) -> tuple[Step, Step]:
    """A renewal run for real against the sandbox: its done charge and its done receipt."""
    task = task_start(kind="renewal", goal="renew", refs=renewal_refs(inv))
    assert run(task).stopped == "finished"
    charge_step = Step.objects.get(task=task, tool="charge_customer")
    receipt = Step.objects.get(task=task, tool="send_email")
    assert (charge_step.state, receipt.state) == ("done", "done")
    return charge_step, receipt


@pytest.mark.usefixtures("committed", "world", "clean_faults")
@pytest.mark.parametrize("as_owner", [False, True], ids=["app", "owner"])
def test_an_undo_link_cannot_be_forged_to_pay_an_invoice_twice(
    app_sql: psycopg.Connection[tuple[object, ...]],
    payments_sandbox: SandboxHandle,
    as_owner: bool,
) -> None:
    """The attack: point a done charge's ``offset_by`` at any other done step of its task
    (the receipt), so the invoice looks refunded, then renew it again."""
    inv = invoice()
    paid, receipt = _paid_renewal(inv)
    params = owner_connection().get_connection_params() if as_owner else None
    with contextlib.ExitStack() as stack:
        conn = (
            stack.enter_context(psycopg.connect(**params, autocommit=True))
            if params is not None
            else app_sql
        )
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="recorded as its undo"):
            conn.execute(
                "UPDATE journal_step SET offset_by_id = %s WHERE id = %s", [receipt.pk, paid.pk]
            )
        # Nor a done undo of another step, nor of another task.
        other, _ = _paid_renewal(invoice())
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                "UPDATE journal_step SET offset_by_id = %s WHERE id = %s", [other.pk, paid.pk]
            )
    assert Step.objects.get(pk=paid.pk).offset_by_id is None
    again = task_start(kind="renewal", goal="renew again", refs=renewal_refs(inv))
    assert run(again).stopped == "finished"
    refused = Step.objects.get(task=again, tool="charge_customer")
    assert (refused.state, refused.refusal) == ("not_done", "already_done")
    assert len(charges_of(payments_sandbox, inv)) == 1


FORGED_STEPS = {
    "done": ("done", "", '{"state": "done", "evidence": {"charge": "ch_FORGED"}}', "now()"),
    "unknown": ("unknown", "", '{"reason": "timed out", "evidence": {"charge": "ch_X"}}', "NULL"),
    "refusal with evidence": (
        "not_done",
        "in_flight",
        '{"proof": "refused", "evidence": {"charge": "ch_FORGED"}}',
        "now()",
    ),
    "refusal without its code": ("not_done", "", '{"proof": "declined"}', "now()"),
    "pending with an outcome": ("pending", "", '{"evidence": {"charge": "ch_FORGED"}}', "NULL"),
    # Even as a step about to be attempted: the task is over and no lease is held.
    "pending, into a finished task": ("pending", "", "{}", "NULL"),
}


@pytest.mark.usefixtures("committed", "world", "clean_faults")
@pytest.mark.parametrize("forged", sorted(FORGED_STEPS))
def test_a_step_is_never_born_settled(
    app_sql: psycopg.Connection[tuple[object, ...]], forged: str
) -> None:
    """The attack: insert a charge step already ``done`` (with a receipt) for a task that
    finished without paying; the customer's page would then say Paid. (What stays open to
    these credentials is the app's own job, in several journaled statements: take a task's
    lease and settle a step in flight with made-up evidence — docs/design.md §4.)"""
    inv = invoice()
    task = task_start(kind="renewal", goal="renew", refs=renewal_refs(inv, payment_method=DECLINED))
    assert run(task).stopped == "finished"
    assert payment_of(invoice=inv) is not None
    before = payment_of(invoice=inv)
    assert before is not None and before.state == "not_done"
    state, refusal, outcome, settled = FORGED_STEPS[forged]
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="step ao:"):
        app_sql.execute(
            f"""
            INSERT INTO journal_step (task_id, n, kind, tool, args, key, cost, guard, once,
                retries, refusal, undo_tool, state, detail, outcome, attempts, lookups,
                decision, created_at, settled_at)
            SELECT id, step_count + 1, 'call', 'charge_customer', '{{}}'::jsonb,
                   journal_step_key(p_task => id, p_n => step_count + 1), 'full', NULL, false,
                   0, %s, '',
                   %s, 'forged', %s::jsonb, 0, 0, '{{}}'::jsonb, now(), {settled}
              FROM journal_task WHERE id = %s
            """,  # noqa: S608
            [refusal, state, outcome, task.pk],
        )
    assert payment_of(invoice=inv) == before


# Each is refused by the rule for the state it is born in (journal/sql/journal_step_born),
# not by the one before it (a runnable task, a live lease, its own number): that is passed.
BORN_UNDER_A_LEASE = {
    "done": (
        "done",
        "",
        '{"state": "done", "evidence": {"charge": "ch_FORGED"}}',
        "now()",
        "a call step is never recorded done",
    ),
    "unknown": (
        "unknown",
        "",
        '{"reason": "timed out", "evidence": {"charge": "ch_X"}}',
        "NULL",
        "a call step is never recorded unknown",
    ),
    "refusal with evidence": (
        "not_done",
        "in_flight",
        '{"proof": "refused", "evidence": {"charge": "ch_FORGED"}}',
        "now()",
        "never attempted and with no evidence",
    ),
    "pending with evidence": (
        "pending",
        "",
        '{"evidence": {"charge": "ch_FORGED"}}',
        "NULL",
        "carries no outcome yet",
    ),
}


@pytest.mark.parametrize("forged", sorted(BORN_UNDER_A_LEASE))
@pytest.mark.parametrize("as_owner", [False, True], ids=["app", "owner"])
def test_a_step_is_never_born_settled_even_under_a_live_lease(
    app_sql: psycopg.Connection[tuple[object, ...]], forged: str, as_owner: bool
) -> None:
    """The same attack on a task that can still advance: take its lease as these
    credentials can (the columns of a lease are the app's to write), number the step as
    the task counts it, and insert it settled. The birth rule refuses it by its state."""
    task = task_create(kind="renewal", goal="renew", refs=renewal_refs(invoice()))
    state, refusal, outcome, settled, rule = BORN_UNDER_A_LEASE[forged]
    params = owner_connection().get_connection_params() if as_owner else None
    with contextlib.ExitStack() as stack:
        conn = (
            stack.enter_context(psycopg.connect(**params, autocommit=True))
            if params is not None
            else app_sql
        )
        taken = conn.execute(
            """
            UPDATE journal_task
               SET lease_owner = 'foothold', lease_token = lease_token + 1,
                   lease_taken_at = now(), lease_expires_at = now() + interval '1 minute',
                   step_count = step_count + 1, version = version + 1
             WHERE id = %s AND status = 'runnable'
            RETURNING step_count
            """,
            [task.pk],
        ).fetchall()
        assert taken == [(1,)]
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match=rule) as refused:
            conn.execute(
                f"""
                INSERT INTO journal_step (task_id, n, kind, tool, args, key, cost, guard,
                    once, retries, refusal, undo_tool, state, detail, outcome, attempts,
                    lookups, decision, created_at, settled_at)
                SELECT id, step_count, 'call', 'charge_customer', '{{}}'::jsonb,
                       journal_step_key(p_task => id, p_n => step_count), 'full', NULL,
                       false, 0, %s, '', %s, 'forged', %s::jsonb, 0, 0, '{{}}'::jsonb,
                       now(), {settled}
                  FROM journal_task WHERE id = %s
                """,  # noqa: S608
                [refusal, state, outcome, task.pk],
            )
        assert "recorded only for a runnable task" not in str(refused.value)
    assert not Step.objects.filter(task=task).exists()


@pytest.mark.parametrize("as_owner", [False, True], ids=["app", "owner"])
def test_an_undo_link_cannot_name_the_undo_of_another_step_of_the_task(
    app_sql: psycopg.Connection[tuple[object, ...]], as_owner: bool
) -> None:
    """Two charges of one saga, the second refunded and the first not (its refund was
    refused): the second's done refund is a real undo of the same task, but not of the
    first charge, so it cannot mark the first as undone (journal/sql/journal_step_rules)."""
    provider, tools = saga_world()
    tools["charge"].script = ["ok", "ok", "refuse"]
    tools["refund"].script = ["ok", "refuse"]
    task = task_create(kind="trip", goal="saga", plan=[{"tool": "charge"}])
    task_advance(
        task_id=task.pk,
        planner=ScriptedPlanner([charge(invoice()), charge(invoice()), charge(invoice())]),
        tools=tools,
        rules=SagaRules(),
    )
    made = {s.n: s for s in Step.objects.filter(task=task, kind="call")}
    first, second, undo = made[1], made[2], made[4]
    assert (first.state, second.state, undo.state) == ("done", "done", "done")
    assert (undo.tool, undo.offsets_id, second.offset_by_id) == ("refund", second.pk, undo.pk)
    assert (made[5].tool, made[5].offsets_id, made[5].state) == ("refund", first.pk, "not_done")
    params = owner_connection().get_connection_params() if as_owner else None
    with contextlib.ExitStack() as stack:
        conn = (
            stack.enter_context(psycopg.connect(**params, autocommit=True))
            if params is not None
            else app_sql
        )
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="recorded as its undo"):
            conn.execute(
                "UPDATE journal_step SET offset_by_id = %s WHERE id = %s", [undo.pk, first.pk]
            )
    assert Step.objects.get(pk=first.pk).offset_by_id is None


@pytest.mark.usefixtures("committed", "world", "clean_faults")
def test_a_finish_step_is_written_only_as_its_task_ends(
    app_sql: psycopg.Connection[tuple[object, ...]],
) -> None:
    task = task_create(kind="renewal", goal="renew", refs=renewal_refs(invoice()))
    for tool, args in (("", "{}"), ("charge_customer", '{"amount": 4900}')):
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="finish step"):
            app_sql.execute(
                """
                INSERT INTO journal_step (task_id, n, kind, tool, args, key, cost, once,
                    retries, refusal, undo_tool, state, detail, outcome, attempts, lookups,
                    decision, created_at, settled_at)
                VALUES (%s, 1, 'finish', %s, %s::jsonb,
                        journal_step_key(p_task => %s::uuid, p_n => 1), '', false, 0, '',
                        '', 'done', 'paid', '{"evidence": {"charge": "ch_FORGED"}}', 0, 0,
                        '{}', now(), now())
                """,
                [task.pk, tool, args, str(task.pk)],
            )
    assert not Step.objects.filter(task=task).exists()


def test_no_temporary_table_can_stand_in_for_a_journal_table(
    app_sql: psycopg.Connection[tuple[object, ...]],
) -> None:
    """A temporary ``journal_step`` holding a made-up undo would be searched before the real
    one by a function that does not pin its search path. The app may make none, and the
    journal's functions look in pg_temp last, so not even the owner's temporary table
    counts."""
    paid = _settled_step(undo="refund")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        app_sql.execute("CREATE TEMP TABLE journal_step (id bigint)")
    params = owner_connection().get_connection_params()
    with psycopg.connect(**params) as owner:
        owner.execute(
            "CREATE TEMP TABLE journal_step (id bigint, task_id uuid, offsets_id bigint, "
            "state text, kind text, tool text)"
        )
        owner.execute(
            "INSERT INTO journal_step VALUES (%s, %s, %s, 'done', 'call', %s)",
            [paid.pk, paid.task_id, paid.pk, paid.undo_tool],
        )
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="recorded as its undo"):
            owner.execute(
                "UPDATE public.journal_step SET offset_by_id = %s WHERE id = %s",
                [paid.pk, paid.pk],
            )
        owner.rollback()
    assert Step.objects.get(pk=paid.pk).offset_by_id is None


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM journal_object_once",
        "DELETE FROM journal_object_live",
        "DELETE FROM journal_step_undo",
        "INSERT INTO journal_object_once (guard_key, step_id, task_id, key, tool, evidence)"
        " VALUES ('x', 1, gen_random_uuid(), 'k', 't', '{}')",
        "UPDATE journal_object_once SET step_id = 0",
    ],
)
def test_the_app_only_reads_the_guards_claims(
    app_sql: psycopg.Connection[tuple[object, ...]], statement: str
) -> None:
    """The claims are the database's own (journal_step_claims): an app that could delete the
    claim of a paid invoice could pay it again."""
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        app_sql.execute(statement)
