"""Whoever holds the app's database credentials cannot rewrite the journal (issues 8, 15, 35).

The app's role may read the journal and execute the journal's functions its kind of process
needs (journal/callers.py); it may write no journal table. Every privilege it holds is read
here from PostgreSQL's own catalogue and compared with the one declaration
(agentops/dbroles.py, journal/callers.py). The attacks are made the way an attacker with
DATABASE_URL would: a plain psycopg connection as the app's role, autocommit, raw SQL, then
the functions it may call, one after the other. The suite itself runs as that role too
(tests/conftest.py), so everything else in it shows the app works with these privileges.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from agentops.audit.models import Finding, FindingKind
from agentops.audit.services import audit_run
from agentops.dbroles import APP_COLUMNS, APP_FUNCTIONS, JOURNAL_PREFIX, READ_ONLY_TABLES
from agentops.effects import task_start
from commerce.customers.selectors import payment_of
from journal.callers import callable_by
from journal.leases import lease_acquire
from journal.models import Step, Task
from journal.outcomes import Outcome
from journal.record import step_record, task_create
from journal.settle import step_settle
from tests.agentops.test_business_effects import (  # noqa: F401 (world: a fixture)
    charges_of,
    renewal_refs,
    run,
    world,
)
from tests.databases import owner_connection, role_params
from tests.journal.support import ChargeTool, Provider, charge, invoice
from tests.sandbox.fixtures import SandboxHandle

pytestmark = pytest.mark.usefixtures("committed")

DECLINED = "pm_card_chargeDeclined"


def _settled_step() -> Step:
    task = task_create(kind="renewal", goal="charge the invoice", refs={"invoice": invoice()})
    lease = lease_acquire(task_id=task.pk, owner="t")
    assert lease is not None
    tool = ChargeTool(Provider())
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


# --- Every privilege the role holds, from the catalogue, against the one declaration ---------

# What the role holds on each table, and on each column of it, as PostgreSQL grants them.
TABLE_PRIVILEGES = """
SELECT c.relname, a.privilege_type
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
       LATERAL aclexplode(c.relacl) a
 WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v') AND NOT c.relispartition
   AND a.grantee = %s::regrole
"""
COLUMN_PRIVILEGES = """
SELECT c.relname, t.attname, a.privilege_type
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_attribute t ON t.attrelid = c.oid AND t.attnum > 0 AND NOT t.attisdropped,
       LATERAL aclexplode(t.attacl) a
 WHERE n.nspname = current_schema() AND NOT c.relispartition
   AND a.grantee = %s::regrole
"""
# Who may execute each function the tables' owner made: a role by name, or PUBLIC ("-").
FUNCTION_GRANTEES = """
SELECT p.proname, COALESCE(r.rolname, '-')
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace,
       LATERAL aclexplode(COALESCE(p.proacl, acldefault('f', p.proowner))) a
       LEFT JOIN pg_roles r ON r.oid = a.grantee
 WHERE n.nspname = current_schema() AND p.proowner = %s::regrole
   AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner
"""


@pytest.mark.parametrize("role", sorted(settings.DATABASE_ROLES))
def test_every_privilege_each_role_holds_is_declared(
    app_sql: psycopg.Connection[tuple[object, ...]], role: str
) -> None:
    """For each role of DATABASE_ROLES, read from the catalogue: on the journal's tables,
    SELECT and nothing else; on agentops' own, SELECT, INSERT, and UPDATE of exactly the
    listed columns; on the framework's, the usual four. It may execute exactly the functions
    its kinds of process call (journal/callers.py), and agentops' own listed ones; nobody
    (not PUBLIC) may execute any other function the owner made."""
    kinds = settings.DATABASE_ROLES[role]
    held: dict[str, set[str]] = {}
    for table, privilege in app_sql.execute(TABLE_PRIVILEGES, [role]).fetchall():
        held.setdefault(str(table), set()).add(str(privilege))
    updatable: dict[str, set[str]] = {}
    for table, column, privilege in app_sql.execute(COLUMN_PRIVILEGES, [role]).fetchall():
        assert privilege == "UPDATE", (table, column, privilege)
        updatable.setdefault(str(table), set()).add(str(column))
    assert held, f"{role} holds nothing: it is not granted by migrate"
    for table, privileges in held.items():
        if table.startswith(JOURNAL_PREFIX) or table in READ_ONLY_TABLES:
            assert privileges == {"SELECT"}, table
        elif table in APP_COLUMNS:
            assert privileges == {"SELECT", "INSERT"}, table
        else:
            assert privileges == {"SELECT", "INSERT", "UPDATE", "DELETE"}, table
    assert updatable == {
        table: set(columns.updatable) for table, columns in APP_COLUMNS.items() if columns.updatable
    }
    owner = owner_connection().settings_dict["USER"]
    executes = {
        str(name)
        for name, grantee in app_sql.execute(FUNCTION_GRANTEES, [owner]).fetchall()
        if grantee == role
    }
    declared = {name for kind in kinds for name in callable_by(kind)} | set(APP_FUNCTIONS)
    assert executes == declared


def test_nobody_but_the_declared_roles_may_execute_a_function_the_owner_made(
    app_sql: psycopg.Connection[tuple[object, ...]],
) -> None:
    owner = owner_connection().settings_dict["USER"]
    grantees = {str(g) for _, g in app_sql.execute(FUNCTION_GRANTEES, [owner]).fetchall()}
    assert grantees <= set(settings.DATABASE_ROLES), grantees  # not PUBLIC ("-")


def test_the_web_role_can_take_no_lease_record_no_effect_and_settle_none() -> None:
    """What faces the network (the web server, the HTTP API, the MCP server) starts tasks and
    records people's decisions; it cannot take a lease, record an effect or settle one."""
    step = _settled_step()
    with psycopg.connect(**role_params("web"), autocommit=True) as web:
        for sql, params in (
            (
                "SELECT * FROM journal_lease_take(p_task => %s, p_owner => 'x', p_lease => 60)",
                [step.task_id],
            ),
            (
                "SELECT * FROM journal_record(p_task => %s, p_token => 1, p_lease => 60, "
                "p_tool => 'charge', p_args => '{}', p_decision => '{}', p_entry => '{}')",
                [step.task_id],
            ),
            (
                "SELECT * FROM journal_settle(p_step => %s, p_state => 'done', p_detail => '', "
                "p_outcome => '{\"evidence\": {}}', p_entry => '{}', p_via => 'webhook')",
                [step.pk],
            ),
            ("SELECT journal_step_noted(p_step => %s, p_notes => '[]')", [step.pk]),
            (
                "SELECT * FROM journal_finish(p_task => %s, p_token => 1, p_lease => 60, "
                "p_to => 'finished', p_shortfall => false, p_detail => '', p_outcome => '{}', "
                "p_decision => '{}', p_entry => '{}')",
                [step.task_id],
            ),
        ):
            _refused(web, sql, params)
        # What it is for: a task started, a person's decision recorded.
        made = web.execute(
            "SELECT journal_task_create(p_id => gen_random_uuid(), p_kind => 'renewal', "
            "p_goal => 'g', p_refs => '{}', p_plan => '[]', p_entry => '{}')"
        ).fetchone()
        assert made is not None


def test_the_worker_role_records_no_persons_decision() -> None:
    """The workers take leases, record, settle; a person's decision (an approval, a resume,
    a settlement by hand) is not theirs to record."""
    step = _settled_step()
    with psycopg.connect(**role_params("worker"), autocommit=True) as worker:
        for sql, params in (
            (
                "SELECT journal_task_resume(p_task => %s, p_actor => 'x', p_reason => 'y')",
                [step.task_id],
            ),
            (
                "SELECT journal_approval_approve(p_task => %s, p_approval => 1, p_digest => 'x', "
                "p_actor => 'x')",
                [step.task_id],
            ),
            (
                "SELECT journal_step_resolve(p_step => %s, p_actor => 'x', p_done => true, "
                "p_evidence => 'e', p_reason => 'y')",
                [step.pk],
            ),
            (
                "SELECT journal_task_create(p_id => gen_random_uuid(), p_kind => 'renewal', "
                "p_goal => 'g', p_refs => '{}', p_plan => '[]', p_entry => '{}')",
                [],
            ),
        ):
            _refused(worker, sql, params)


# --- The attacks of issue 35, from outside, with the app's credentials -----------------------


def _paid_renewal(inv: str) -> Task:
    """A renewal run for real against the sandbox: its charge and its receipt done."""
    task = task_start(kind="renewal", goal="renew", refs=renewal_refs(inv))
    assert run(task).stopped == "finished"
    return Task.objects.get(pk=task.pk)


def _refused(conn: psycopg.Connection[tuple[object, ...]], sql: str, params: list[Any]) -> None:
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(sql, params)


@pytest.mark.usefixtures("committed", "world", "clean_faults")
@pytest.mark.parametrize("role", ["web", "worker"])
def test_a_paid_invoice_cannot_be_freed_to_be_charged_again(
    role: str, payments_sandbox: SandboxHandle
) -> None:
    """Chain 1: reopen a finished renewal, take its lease by hand, record a refund that
    offsets the paid charge and settle it done with made-up evidence, then renew the
    invoice again. Every statement is refused; so is every way through the functions the
    role may call; the second renewal is refused with the first charge's evidence, and the
    provider holds one PaymentIntent."""
    inv = invoice()
    task = _paid_renewal(inv)
    paid = Step.objects.get(task=task, tool="charge_customer")
    app_sql = psycopg.connect(**role_params(role), autocommit=True)
    for sql, params in (
        (
            "UPDATE journal_task SET status = 'needs_human', attention_code = 'x' WHERE id = %s",
            [task.pk],
        ),
        ("UPDATE journal_task SET status = 'runnable' WHERE id = %s", [task.pk]),
        (
            "UPDATE journal_task SET lease_token = lease_token + 1, lease_owner = 'x', "
            "lease_expires_at = now() + interval '1 hour', step_count = step_count + 1 "
            "WHERE id = %s",
            [task.pk],
        ),
        (
            "INSERT INTO journal_step (task_id, n, kind, tool, args, key, cost, once, offsets_id, "
            "retries, refusal, undo_tool, state, detail, outcome, attempts, lookups, decision, "
            "created_at) SELECT id, step_count + 1, 'call', 'refund_charge', '{}', "
            "journal_step_key(p_task => id, p_n => step_count + 1), 'full', false, %s, 0, '', '', "
            "'pending', '', '{}', 1, 0, '{}', now() FROM journal_task WHERE id = %s",
            [paid.pk, task.pk],
        ),
        (
            'UPDATE journal_step SET state = \'done\', outcome = \'{"evidence": {"refund": '
            '"re_FORGED"}}\', settled_at = now() WHERE task_id = %s',
            [task.pk],
        ),
        ("UPDATE journal_step SET offset_by_id = id WHERE id = %s", [paid.pk]),
        ("DELETE FROM journal_object_once WHERE step_id = %s", [paid.pk]),
    ):
        _refused(app_sql, sql, params)
    # Through the functions it may call: the finished task is not run again by any of them.
    # (The web role may take no lease at all; the worker's records nothing into it.)
    try:
        lease = app_sql.execute(
            "SELECT lease_token FROM journal_lease_take(p_task => %s, p_owner => 'x', "
            "p_lease => 60)",
            [task.pk],
        ).fetchone()
    except psycopg.errors.InsufficientPrivilege:
        assert role == "web"
        lease = None
    if lease is not None:
        recorded = app_sql.execute(
            "SELECT step_id FROM journal_record(p_task => %s, p_token => %s, p_lease => 60, "
            "p_tool => 'refund_charge', p_args => '{}', p_decision => '{}', p_entry => '{}', "
            "p_forward => false, p_offsets => %s, p_key => %s)",
            [task.pk, lease[0], paid.n, paid.key + ":undo"],
        ).fetchone()
        assert recorded == (None,)  # the task is not runnable: nothing was recorded
    for move in ("journal_task_resume", "journal_saga_compensate", "journal_task_cancel"):
        with pytest.raises(psycopg.Error, match="only a task that needs|over|ended|permission"):
            app_sql.execute(
                f"SELECT {move}(p_task => %s, p_actor => 'x', p_reason => 'y')",  # noqa: S608
                [task.pk],
            )
    app_sql.close()
    fresh = Step.objects.get(pk=paid.pk)
    assert (fresh.state, fresh.offset_by_id) == ("done", None)
    assert Task.objects.get(pk=task.pk).status == "finished"
    again = task_start(kind="renewal", goal="renew again", refs=renewal_refs(inv))
    assert run(again).stopped == "finished"
    refused = Step.objects.get(task=again, tool="charge_customer")
    assert (refused.state, refused.refusal) == ("not_done", "already_done")
    assert paid.key in refused.detail
    assert len(charges_of(payments_sandbox, inv)) == 1


@pytest.mark.usefixtures("committed", "world", "clean_faults")
@pytest.mark.parametrize("role", ["web", "worker"])
def test_a_customer_is_never_told_paid_for_a_charge_that_never_was(role: str) -> None:
    """Chain 2: a renewal declined at the provider; reopen it and settle a charge done with
    ch_FORGED, so the customer's page says Paid. Refused at every statement, and by every
    function: the task ended, and no move makes it run again."""
    inv = invoice()
    task = task_start(kind="renewal", goal="renew", refs=renewal_refs(inv, payment_method=DECLINED))
    assert run(task).stopped == "finished"
    before = payment_of(invoice=inv)
    assert before is not None and before.state == "not_done"
    declined = Step.objects.get(task=task, tool="charge_customer")
    app_sql = psycopg.connect(**role_params(role), autocommit=True)
    for sql, params in (
        ("UPDATE journal_task SET status = 'runnable' WHERE id = %s", [task.pk]),
        (
            "INSERT INTO journal_step (task_id, n, kind, tool, args, key, cost, once, retries, "
            "refusal, undo_tool, state, detail, outcome, attempts, lookups, decision, created_at, "
            "settled_at) SELECT id, step_count + 1, 'call', 'charge_customer', '{}', "
            "journal_step_key(p_task => id, p_n => step_count + 1), 'full', false, 0, '', '', "
            "'done', 'paid', '{\"evidence\": {\"charge\": \"ch_FORGED\"}}', 1, 0, '{}', "
            "now(), now() "
            "FROM journal_task WHERE id = %s",
            [task.pk],
        ),
        (
            "UPDATE journal_step SET state = 'done', outcome = %s::jsonb WHERE id = %s",
            [json.dumps({"evidence": {"charge": "ch_FORGED"}}), declined.pk],
        ),
    ):
        _refused(app_sql, sql, params)
    # The settled step keeps its outcome whatever report comes: a contradiction is a conflict
    # (for the worker's role, whose part reports are; the web's may make none).
    settle = (
        "SELECT * FROM journal_settle(p_step => %s, p_state => 'done', p_detail => 'paid', "
        "p_outcome => %s::jsonb, p_entry => '{}', p_via => 'webhook')"
    )
    forged = [declined.pk, json.dumps({"evidence": {"charge": "ch_FORGED"}})]
    if role == "web":
        _refused(app_sql, settle, forged)
    else:
        app_sql.execute(settle, forged)
    app_sql.close()
    assert Step.objects.get(pk=declined.pk).state == "not_done"
    after = payment_of(invoice=inv)
    assert after is not None and after.state != "done"  # at most, a person looks at a conflict


@pytest.mark.usefixtures("committed", "world", "clean_faults")
def test_what_a_runners_credentials_can_still_forge_the_provider_audit_finds() -> None:
    """The runner's role settles steps: that is its job, and the database cannot tell a
    provider's evidence from a made-up one. An attacker holding it can take the lease of a
    task that is still running, record a charge and settle it done with ch_FORGED, and the
    customer's page would say Paid. The provider audit (docs/design.md §15), within its one
    period, finds the provider does not show it, and hands the task to a person."""
    since = timezone.now()
    inv = invoice()
    task = task_start(kind="renewal", goal="renew", refs=renewal_refs(inv))
    app_sql = psycopg.connect(**role_params("worker"), autocommit=True)
    lease = app_sql.execute(
        "SELECT lease_token FROM journal_lease_take(p_task => %s, p_owner => 'x', p_lease => 60)",
        [task.pk],
    ).fetchone()
    assert lease is not None
    args = {"invoice": inv, "amount": 4900, "currency": "usd", "payment_method": "pm_card_visa"}
    step = app_sql.execute(
        "SELECT step_id FROM journal_record(p_task => %s, p_token => %s, p_lease => 60, "
        "p_tool => 'charge_customer', p_args => %s::jsonb, p_decision => '{}', p_entry => '{}', "
        "p_cost => 'full', p_guard => %s, p_guard_key => %s, p_once => true)",
        [task.pk, lease[0], json.dumps(args), f"charge:{inv}", f"charge:{inv.casefold()}"],
    ).fetchone()
    assert step is not None and step[0] is not None
    app_sql.execute(
        "SELECT * FROM journal_settle(p_step => %s, p_state => 'done', p_detail => 'paid', "
        "p_outcome => %s::jsonb, p_entry => '{}', p_via => 'attempt', p_task => %s, "
        "p_token => %s, p_lease => 60)",
        [
            step[0],
            json.dumps({"evidence": {"payment_intent": "pi_FORGED", "charge": "ch_FORGED"}}),
            task.pk,
            lease[0],
        ],
    )
    app_sql.close()
    told = payment_of(invoice=inv)
    assert told is not None and told.state == "done"  # what the forgery achieves, until...
    with override_settings(AUDIT_INTERVAL_SECONDS=24 * 3600):
        report = audit_run(
            provider="stripe", since=since, until=since + timedelta(minutes=5), trigger="command"
        )
    assert not report.error, report.error
    found = Finding.objects.get(step_id=int(str(step[0])))
    assert found.kind == FindingKind.MISSING
    flagged = Task.objects.get(pk=task.pk)
    assert (flagged.status, flagged.attention_code) == ("needs_human", "audit_finding")


# --- What the role cannot switch off ----------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        # The replication role skips ordinary triggers: superusers only.
        "SET session_replication_role = replica",
        # Disabling or dropping the guards' trigger needs the table's owner.
        "ALTER TABLE journal_step DISABLE TRIGGER journal_step_claims_born",
        "ALTER TABLE journal_step DISABLE TRIGGER USER",
        "DROP TRIGGER journal_step_claims_moved ON journal_step",
        "TRUNCATE journal_entry, journal_step, journal_task",
        "CREATE TABLE public.agentops_shadow (id int)",
        "CREATE TEMP TABLE journal_step (id bigint)",
        "CREATE OR REPLACE FUNCTION journal_transition() RETURNS void LANGUAGE sql AS ''",
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


def test_the_internal_parts_of_the_moves_are_not_the_apps_to_call(
    app_sql: psycopg.Connection[tuple[object, ...]],
) -> None:
    """The state machine, the lease check and settling are parts of the moves, called only
    from inside them: a direct call is refused, so none can be made without its move's own
    preconditions."""
    step = _settled_step()
    for sql in (
        "SELECT * FROM journal_transition(p_task => %s, p_to => 'needs_human', "
        "p_from => ARRAY['runnable'], p_code => 'x', p_reason => 'y')",
        "SELECT * FROM journal_hold(p_task => %s, p_token => 1, p_lease => 60)",
        "SELECT * FROM journal_saga_unwound(p_task => %s, p_reason => 'y')",
    ):
        _refused(app_sql, sql, [step.task_id])


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
    _refused(app_sql, statement, [])
