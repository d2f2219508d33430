"""The provider audit (agentops/audit, issue 20): each provider's records matched, by key,
against the journal — real PostgreSQL, the real tools and the shipped kinds' audits against
the sandbox providers, each a process of its own.

Each test audits a window that starts when it does: the sandboxes and the database are shared
by the whole run, and what earlier tests left is theirs.
"""

from __future__ import annotations

import io
import os
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django.utils.html import escape
from rq.registry import ScheduledJobRegistry

from agentops import effects
from agentops.audit import gauges
from agentops.audit.matching import StepSide, match
from agentops.audit.models import AuditRun, Finding, FindingKind, ProviderWatch
from agentops.audit.services import RANG_KEY, RunReport, audit_run, audits_sweep
from agentops.doorbell import run_queue
from agentops.effects import task_start
from agentops.jobs import audit_provider
from agentops.kinds import rules_for, tools_for
from agentops.runner import task_run
from agentops.workers import AUDIT_JOB
from commerce.tools.email import SendEmail
from commerce.tools.payments import ChargeCustomer
from devtools.process import HOST, end, free_port, spawn, wait_until
from devtools.sandboxes import sandbox_environment
from journal.leases import lease_acquire, lease_release
from journal.models import Entry, EntryKind, Step, Task
from journal.outcomes import Outcome
from journal.protocols import Call, Decision
from journal.record import step_record, task_create
from journal.run import task_advance
from journal.settle import step_settle
from sandbox.client import SandboxClient
from tests.agentops.test_business_effects import Meanwhile, renewal_refs, trip_refs
from tests.agentops.test_operators import client_for, user
from tests.agentops.workers import quiet_world
from tests.journal.support import invoice
from tests.sandbox.fixtures import SandboxHandle, http_json, stripe_client

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")

OVER = ("finished", "compensated", "cancelled", "needs_human", "awaiting_approval")


@pytest.fixture
def world(on_sandbox: dict[str, Any]) -> Iterator[None]:
    redis = quiet_world()
    with override_settings(**on_sandbox, TOOL_TIMEOUT_SECONDS=1.0, PLANNER="scripted"):
        yield
    redis.flushdb()


@pytest.fixture
def since(world: None) -> datetime:
    """The window's start: this test's own effects and steps only."""
    return timezone.now()


def audit(provider: str, since: datetime) -> RunReport:
    report = audit_run(provider=provider, since=since, until=timezone.now(), trigger="command")
    assert not report.error, report.error
    return report


def run(task: Task, timeout: float = 30) -> Task:
    """Run the task as a worker would, in this process, until it is over."""
    deadline = time.monotonic() + timeout
    while True:
        task_run(task_id=task.pk)
        task = Task.objects.get(pk=task.pk)
        if task.status in OVER:
            return task
        assert time.monotonic() < deadline, f"task {task.pk} still {task.status}"
        time.sleep(0.05)


def renewed() -> Task:
    """A renewal charged and its receipt sent, for real, at the sandboxes."""
    task = run(task_start(kind="renewal", goal="renew", refs=renewal_refs(invoice())))
    assert task.status == "finished", task.attention
    return task


def step_of(task: Task, tool: str) -> Step:
    return Step.objects.get(task=task, tool=tool, kind="call")


# --- What the audit finds ------------------------------------------------------------------------


def test_a_charge_carrying_our_key_that_no_step_made_is_one_finding_however_often_audited(
    since: datetime, payments_sandbox: SandboxHandle
) -> None:
    key = f"ao:{uuid.uuid4()}:1"  # our key's shape, and no step has it
    intent = (
        stripe_client(payments_sandbox.url)
        .v1.payment_intents.create(
            params={
                "amount": 4900,
                "currency": "usd",
                "payment_method": "pm_card_visa",
                "confirm": True,
                "metadata": {"agentops_key": key},
            }
        )
        .to_dict()
    )

    first = audit("stripe", since)
    assert first.found >= 1
    (finding,) = Finding.objects.filter(key=key)
    assert (finding.kind, finding.effect_id, finding.task_id) == ("no_step", intent["id"], None)
    assert finding.provider_side["amount"] == 4900
    assert finding.provider_side["raw"]["metadata"] == {"agentops_key": key}
    assert "client_secret" not in str(finding.provider_side)  # never stored
    assert finding.journal_side == {}

    # Audited again, by hand this time: found again, stored once, nothing new.
    out = io.StringIO()
    call_command(
        "audit_providers", "--since", since.isoformat(), "--provider", "stripe", stdout=out
    )
    assert "0 new" in out.getvalue(), out.getvalue()
    again = audit("stripe", since)
    assert again.found == 0 and again.seen >= 1
    assert Finding.objects.filter(key=key).count() == 1


def test_a_refund_made_at_the_provider_is_a_finding_that_hands_its_task_to_a_person(
    since: datetime, payments_sandbox: SandboxHandle
) -> None:
    task = renewed()
    charge = step_of(task, "charge_customer")
    assert audit("stripe", since).found == 0  # all is as the journal says

    # Someone refunds the payment in the provider's dashboard: no key, no step, no webhook the
    # journal can place.
    refund = payments_sandbox.client.refund_from_dashboard(charge.evidence["payment_intent"])
    assert audit("stripe", since).found == 1

    finding = Finding.objects.get(step=charge)
    assert finding.kind == FindingKind.OFFSET_UNKNOWN and finding.task_id == task.pk
    # Filed by the refund (a second refund of the payment is a finding of its own).
    assert finding.effect_id == refund["id"]
    assert charge.evidence["payment_intent"] in finding.summary
    assert "refunded 4900 usd" in finding.summary
    assert finding.provider_side["raw"]["amount_refunded"] == 4900
    assert finding.journal_side["state"] == "done" and finding.journal_side["undone"] is False
    task.refresh_from_db()
    assert task.status == "needs_human" and task.attention_code == "audit_finding"
    assert "refunded 4900 usd" in task.attention
    noted = Entry.objects.get(task=task, kind=EntryKind.AUDIT_FINDING)
    assert noted.step_id == charge.pk and noted.data["finding"] == finding.pk

    # Audited again: nothing new, and the task is not handed over twice.
    assert audit("stripe", since).found == 0
    assert Entry.objects.filter(task=task, kind=EntryKind.TASK_FLAGGED).count() == 1


def test_a_done_step_whose_effect_the_provider_no_longer_shows_is_a_finding(
    since: datetime, mail_sandbox: SandboxHandle
) -> None:
    task = renewed()
    receipt = step_of(task, "send_email")
    mail_sandbox.client.forget(receipt.evidence["message"])  # the provider lost it

    assert audit("mail", since).found == 1
    assert audit("stripe", since).found == 0  # the charge is where it should be
    (finding,) = Finding.objects.filter(task=task)
    assert finding.kind == FindingKind.MISSING and finding.step_id == receipt.pk
    assert finding.effect_id == receipt.evidence["message"] and finding.provider_side == {}
    assert finding.journal_side["args"]["to"] == "ada@example.com"
    task.refresh_from_db()
    assert task.status == "needs_human" and task.attention_code == "audit_finding"


def charged_otherwise(payments_sandbox: SandboxHandle, **taken: Any) -> tuple[Task, Step, str]:
    """A charge step of 49.00 usd settled done, whose payment the provider made with
    ``taken`` in place of what the step decided; the task, the step and the intent's id."""
    task = task_create(kind="renewal", goal="charge", refs={"invoice": invoice()})
    lease = lease_acquire(task_id=task.pk, owner="audit-test")
    assert lease is not None
    args = {
        "invoice": task.refs["invoice"],
        "amount": 4900,
        "currency": "usd",
        "payment_method": "pm_card_visa",
    }
    step = step_record(
        lease=lease,
        decision=Call("charge_customer", args),
        tools={"charge_customer": ChargeCustomer()},
    )
    made: Any = {**args, **taken, "confirm": True, "metadata": {"agentops_key": step.key}}
    intent = (
        stripe_client(payments_sandbox.url)
        .v1.payment_intents.create(params=made, options={"idempotency_key": step.key})
        .to_dict()
    )
    evidence = {key: made[key] for key in ("amount", "currency")} | {"payment_intent": intent["id"]}
    step_settle(step_id=step.pk, outcome=Outcome.done(evidence), via="attempt", lease=lease)
    lease_release(lease)
    return task, step, intent["id"]


def test_an_effect_of_another_amount_than_its_step_decided_is_a_finding(
    since: datetime, payments_sandbox: SandboxHandle
) -> None:
    # The provider took 59.00 under the step's key for the 49.00 the step decided.
    task, step, intent = charged_otherwise(payments_sandbox, amount=5900)

    assert audit("stripe", since).found == 1
    finding = Finding.objects.get(step=step)
    assert finding.kind == FindingKind.MISMATCH and finding.effect_id == intent
    assert finding.differences == {"amount": {"journal": 4900, "provider": 5900}}
    assert "amount 4900 in the journal, 5900 at stripe" in finding.summary
    task.refresh_from_db()
    assert task.status == "needs_human" and task.attention_code == "audit_finding"


def test_an_effect_in_another_currency_than_its_step_decided_is_a_finding(
    since: datetime, payments_sandbox: SandboxHandle
) -> None:
    # The provider took 49.00 under the step's key, in euros where the step decided dollars.
    task, step, intent = charged_otherwise(payments_sandbox, currency="eur")

    assert audit("stripe", since).found == 1
    finding = Finding.objects.get(step=step)
    assert finding.kind == FindingKind.MISMATCH and finding.effect_id == intent
    assert finding.differences == {"currency": {"journal": "usd", "provider": "eur"}}
    assert "currency usd in the journal, eur at stripe" in finding.summary
    assert finding.provider_side["currency"] == "eur"
    task.refresh_from_db()
    assert task.status == "needs_human" and task.attention_code == "audit_finding"
    # Audited again: stored once.
    assert audit("stripe", since).found == 0
    assert Finding.objects.filter(step=step).count() == 1


def test_an_email_sent_to_another_address_than_its_step_decided_is_a_finding(
    since: datetime, mail_sandbox: SandboxHandle
) -> None:
    task = task_create(kind="renewal", goal="receipt", refs={"invoice": invoice()})
    lease = lease_acquire(task_id=task.pk, owner="audit-test")
    assert lease is not None
    args = {
        "to": "ada@example.com",
        "subject": "Your receipt",
        "body": "Paid, thank you.",
        "reference": task.refs["invoice"],
        "purpose": "receipt",
    }
    step = step_record(
        lease=lease, decision=Call("send_email", args), tools={"send_email": SendEmail()}
    )
    # The provider delivered the step's message (its Message-ID) to someone else.
    body = {**SendEmail().body(args, key=step.key), "to": "eve@example.net"}
    sent = http_json("POST", f"{mail_sandbox.url}/v1/messages", body, key=step.key)
    assert sent.status in (200, 201), sent.body
    message = sent.body["id"]
    step_settle(
        step_id=step.pk, outcome=Outcome.done({"message": message}), via="attempt", lease=lease
    )
    lease_release(lease)

    assert audit("mail", since).found == 1
    finding = Finding.objects.get(step=step)
    assert finding.kind == FindingKind.MISMATCH and finding.effect_id == message
    assert finding.differences == {
        "recipient": {"journal": "ada@example.com", "provider": "eve@example.net"}
    }
    assert "recipient ada@example.com in the journal, eve@example.net at mail" in finding.summary
    assert finding.provider_side["raw"]["to"] == "eve@example.net"
    assert finding.journal_side["args"]["to"] == "ada@example.com"
    task.refresh_from_db()
    assert task.status == "needs_human" and task.attention_code == "audit_finding"
    assert audit("mail", since).found == 0
    assert Finding.objects.filter(step=step).count() == 1


def test_what_the_journal_knows_is_not_a_finding(
    since: datetime, payments_sandbox: SandboxHandle, bookings_sandbox: SandboxHandle
) -> None:
    """A receipt sent, a payment refunded by its own task, a saga's hold released by its own
    undo: the providers show each as the journal says, and the audit finds nothing."""
    renewal = renewed()
    inv = invoice()
    trip = task_start(kind="trip", goal="charge, then refund", refs=trip_refs(inv))
    charge = Call(
        "charge_customer",
        {"invoice": inv, "amount": 84000, "currency": "usd", "payment_method": "pm_card_visa"},
    )

    class RefundsItsOwn(Meanwhile):
        def decide(self, facts: Any) -> Decision:
            if len(facts.steps) == 1:
                intent = facts.steps[0].evidence["payment_intent"]
                return Call("refund_charge", {"payment_intent": intent})
            return super().decide(facts)

    task_advance(
        task_id=trip.pk,
        planner=RefundsItsOwn([charge], {}),
        tools=tools_for(trip),
        rules=rules_for(trip),
    )
    assert Step.objects.get(task=trip, tool="charge_customer").offset_by_id is not None
    bookings_sandbox.client.config(full_hotels=["Alfama"])
    try:
        saga = run(task_start(kind="trip", goal="a trip", refs=trip_refs(invoice())))
    finally:
        bookings_sandbox.client.config(full_hotels=[])
    assert saga.status == "compensated", saga.attention
    assert Step.objects.get(task=saga, tool="release_flight").state == "done"

    for provider in ("stripe", "mail", "bookings"):
        audit(provider, since)
    assert not Finding.objects.filter(task__in=[renewal, trip, saga]).exists()
    listed = AuditRun.objects.filter(started_at__gte=since, error="")
    assert {r.provider for r in listed} >= {"stripe", "mail", "bookings"}


# --- Resolving a finding -------------------------------------------------------------------------


def test_a_finding_is_resolved_with_who_and_why_and_a_read_only_operator_cannot(
    since: datetime, payments_sandbox: SandboxHandle
) -> None:
    task = renewed()
    charge = step_of(task, "charge_customer")
    payments_sandbox.client.refund_from_dashboard(charge.evidence["payment_intent"])
    audit("stripe", since)
    finding = Finding.objects.get(step=charge)
    page, resolve = f"/audit/{finding.pk}", f"/audit/{finding.pk}/resolve"

    viewer = client_for(user("Operators (read-only)"))
    listed = viewer.get("/audit/?state=open&provider=stripe")
    assert listed.status_code == 200 and f'id="finding-{finding.pk}"' in listed.content.decode()
    shown = viewer.get(page).content.decode()
    assert "What stripe shows" in shown and "What the journal says" in shown
    assert charge.key in shown and "Resolve this finding" not in shown
    assert viewer.post(resolve, {"reason": "looked fine to me"}).status_code == 403
    finding.refresh_from_db()
    assert finding.resolved_at is None

    operator = user("Operators")
    acting = client_for(operator)
    assert "Resolve this finding" in acting.get(page).content.decode()
    assert acting.post(resolve, {"reason": "  "}).status_code == 400  # why, or nothing
    why = "refunded by support at the customer's request (ticket 4411); invoice reopened"
    assert acting.post(resolve, {"reason": why}).status_code == 302
    finding.refresh_from_db()
    assert (finding.resolved_by, finding.resolution) == (operator.get_username(), why)
    assert finding.resolved_at is not None
    said = Entry.objects.get(task=task, kind=EntryKind.OPERATOR_ACTION)
    assert (said.actor, said.data["action"], said.data["reason"]) == (
        operator.get_username(),
        "resolve audit finding",
        why,
    )
    assert said.data["finding"] == finding.pk and said.step_id == charge.pk
    again = acting.post(resolve, {"reason": "again"})
    assert again.status_code == 409 and "it was resolved by" in again.content.decode()
    task_page = acting.get(f"/tasks/{task.pk}").content.decode()
    assert f'id="finding-{finding.pk}"' in task_page and escape(why) in task_page
    assert Finding.objects.get(pk=finding.pk).resolution == why  # resolved once


def test_findings_need_their_own_permission_to_be_seen() -> None:
    nobody = client_for(user())
    assert nobody.get("/audit/").status_code == 403
    assert Client().get("/audit/").status_code == 302  # to the login page


# --- When audits run -----------------------------------------------------------------------------


def _scheduled(provider: str) -> list[Any]:
    queue = run_queue()
    jobs = [queue.fetch_job(i) for i in ScheduledJobRegistry(queue=queue).get_job_ids()]
    return [
        j for j in jobs if j and j.func_name == AUDIT_JOB and list(j.args) == ["schedule", provider]
    ]


def _queued(trigger: str, provider: str) -> list[Any]:
    return [
        j
        for j in run_queue().get_jobs()
        if j.func_name == AUDIT_JOB and list(j.args) == [trigger, provider]
    ]


@override_settings(
    AUDIT_INTERVAL_SECONDS=3600, AUDIT_RESTART_CHECK_SECONDS=0, AUDIT_WINDOW_SECONDS=1
)
def test_the_daily_audit_is_scheduled_through_rqs_scheduler_and_runs_once_when_due(
    world: None,
) -> None:
    ProviderWatch.objects.update(next_audit_at=None)
    audits_sweep()
    watch = ProviderWatch.objects.get(provider="mail")
    assert watch.next_audit_at is not None
    assert abs((watch.next_audit_at - timezone.now()).total_seconds() - 3600) < 60
    (job,) = _scheduled("mail")  # RQ's scheduler enqueues it at that time
    assert job.description == "audit mail (schedule)"

    # Not due yet: the job (a duplicate, say) does nothing.
    runs = AuditRun.objects.filter(provider="mail").count()
    assert audit_provider("schedule", "mail") == "not due"
    assert AuditRun.objects.filter(provider="mail").count() == runs

    # Due: it runs once, and schedules the next before it lists.
    ProviderWatch.objects.filter(provider="mail").update(
        next_audit_at=timezone.now() - timedelta(seconds=1)
    )
    assert audit_provider("schedule", "mail").startswith("listed ")
    last = AuditRun.objects.filter(provider="mail").latest("started_at")
    assert last.trigger == "schedule" and last.finished_at is not None and not last.error
    assert len(_scheduled("mail")) == 2
    assert audit_provider("schedule", "mail") == "not due"

    # The scheduled job was lost (an emptied Redis): the sweeper rings for it once it is overdue.
    run_queue().connection.delete(RANG_KEY.format("mail"))
    ProviderWatch.objects.filter(provider="mail").update(
        next_audit_at=timezone.now() - timedelta(minutes=10)
    )
    audits_sweep()
    assert len(_queued("schedule", "mail")) == 1
    audits_sweep()  # rung once, not at every sweep
    assert len(_queued("schedule", "mail")) == 1


def _mail_sandbox(port: int, log: Path) -> Any:
    proc = spawn(
        [sys.executable, "-m", "sandbox.mail", "--port", str(port)],
        env=sandbox_environment(os.environ),
        output=log,
    )
    client = SandboxClient(f"http://{HOST}:{port}")
    wait_until(client.health, what="the mail sandbox", timeout=30, proc=proc)
    return proc


@override_settings(AUDIT_INTERVAL_SECONDS=0, AUDIT_WINDOW_SECONDS=1)
def test_a_provider_that_restarted_is_noticed_and_audited(world: None, tmp_path: Path) -> None:
    port = free_port()
    url = f"http://{HOST}:{port}"
    proc = _mail_sandbox(port, tmp_path / "mail-1.log")
    try:
        with override_settings(MAIL_API_BASE=url, AUDIT_RESTART_CHECK_SECONDS=0.01):
            audits_sweep()  # first sight of it at this address: noted, not audited
            watch = ProviderWatch.objects.get(provider="mail")
            first = SandboxClient(url).about()["boot_id"]
            assert (watch.address, watch.boot) == (url, first)
            time.sleep(0.05)
            audits_sweep()  # the same run answers: nothing
            assert _queued("restart", "mail") == []

            end(proc)
            proc = _mail_sandbox(port, tmp_path / "mail-2.log")  # the same address, a new run
            second = SandboxClient(url).about()["boot_id"]
            assert second != first
            time.sleep(0.05)
            assert audits_sweep() == 1
            assert len(_queued("restart", "mail")) == 1
            assert ProviderWatch.objects.get(provider="mail").boot == second
            time.sleep(0.05)
            assert audits_sweep() == 0  # noticed once

            assert audit_provider("restart", "mail").startswith("listed ")
            last = AuditRun.objects.filter(provider="mail").latest("started_at")
            assert last.trigger == "restart" and not last.error
    finally:
        end(proc)


# --- Its gauge -----------------------------------------------------------------------------------


def test_the_open_findings_gauge_counts_them_through_an_index(since: datetime) -> None:
    with CaptureQueriesContext(connection) as queries:
        families = {f.name: f for f in gauges.audit()}
    samples = families["agentops_audit_findings_open"].samples
    assert [s.value for s in samples] == [Finding.objects.open().count()]
    ours = [q["sql"] for q in queries.captured_queries if "agentops_audit_" in q["sql"]]
    assert len(ours) == 2, ours
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        try:
            for sql in ours:
                cursor.execute(f"EXPLAIN {sql}")
                plan = "\n".join(row[0] for row in cursor.fetchall())
                assert "Seq Scan" not in plan, f"{sql}\n{plan}"
        finally:
            cursor.execute("RESET enable_seqscan")


# --- The rules, as a table -----------------------------------------------------------------------

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def side(key: str = "ao:t:1", state: str = "done", **change: Any) -> StepSide:
    fields: dict[str, Any] = {
        "id": 1,
        "task_id": "t",
        "key": key,
        "tool": "charge_customer",
        "state": state,
        "args": {"amount": 4900, "currency": "usd"},
        "evidence": {"payment_intent": "pi_1"},
        "undone": False,
        "undoing": False,
        "created_at": NOW - timedelta(hours=1),
        "settled_at": NOW - timedelta(hours=1),
        **change,
    }
    return StepSide(**fields)


def effect(provider_id: str = "pi_1", key: str = "ao:t:1", **change: Any) -> effects.ProviderEffect:
    fields: dict[str, Any] = {
        "provider_id": provider_id,
        "key": key,
        "tool": "charge_customer",
        "amount": 4900,
        "currency": "usd",
        "created": NOW - timedelta(hours=1),
        **change,
    }
    return effects.ProviderEffect(**fields)


def kinds_of(listed: list[effects.ProviderEffect], *steps: StepSide, window=None) -> list[str]:
    found = match(
        provider="stripe",
        effects=listed,
        steps={s.key: s for s in steps},
        window_done=[s for s in (steps if window is None else window) if s.state == "done"],
        expected=lambda s: {"amount": s.args.get("amount"), "currency": s.args.get("currency")},
        until=NOW,
        list_lag=timedelta(minutes=1),
    )
    return sorted(f"{f.kind}:{f.effect_id}" for f in found)


@pytest.mark.parametrize(
    ("listed", "step", "expected"),
    [
        ([effect()], side(), []),
        ([effect(key="ao:x:1")], side(), ["missing:pi_1", "no_step:pi_1"]),
        ([], side(), ["missing:pi_1"]),
        ([], side(settled_at=NOW - timedelta(seconds=10)), []),  # within the list's lag
        ([effect(amount=5900)], side(), ["mismatch:pi_1"]),
        ([effect(currency="EUR")], side(), ["mismatch:pi_1"]),
        ([effect(currency="USD")], side(), []),  # the same currency, spelt otherwise
        ([effect(tool="refund_charge")], side(), ["mismatch:pi_1"]),
        ([effect(offset="refunded 4900 usd")], side(), ["offset_unknown:pi_1"]),
        ([effect(offset="refunded 4900 usd")], side(undoing=True), []),  # its undo is under way
        ([effect(offset="refunded 4900 usd")], side(undone=True, undoing=True), []),
        ([effect()], side(undone=True, undoing=True), ["offset_missing:pi_1"]),
        ([effect(lapsed=True)], side(undone=True, undoing=True), []),  # a hold that expired
        ([effect()], side(state="not_done"), ["not_done:pi_1"]),
        ([effect()], side(state="unknown"), []),  # reconciliation is finding out
        ([effect()], side(state="pending"), []),
        ([effect(), effect("pi_2")], side(), ["duplicate:pi_2"]),
        ([effect("pi_2"), effect()], side(), ["duplicate:pi_2"]),  # its own: what it names
        ([effect(), effect(), effect(offset="refunded 1 usd")], side(), ["offset_unknown:pi_1"]),
    ],
)
def test_the_matching_rules(
    listed: list[effects.ProviderEffect], step: StepSide, expected: list[str]
) -> None:
    assert kinds_of(listed, step) == expected


def test_the_docs_audit_of_your_own_provider_runs_as_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/operating/audit.md: the example declaration, run as written against a list of
    credits, yields what the matching reads."""
    page = Path(__file__).resolve().parents[2] / "docs" / "operating" / "audit.md"
    section = page.read_text().split("# The provider audit", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    declared: list[type[effects.Audit]] = []

    def register(audit: type[effects.Audit]) -> type[effects.Audit]:
        declared.append(audit)
        return audit

    monkeypatch.setattr(effects, "register_audit", register)
    credits = [
        {"id": "cr_1", "reference": "ao:t:1", "amount": 1500, "currency": "eur", "status": "open"},
        {"id": "cr_2", "reference": "ao:t:2", "amount": 900, "currency": "eur", "status": "voided"},
        {"id": "cr_3", "reference": "theirs", "amount": 100, "currency": "eur", "status": "open"},
    ]
    scope: dict[str, Any] = {"list_credits": lambda **window: credits}
    exec(compile(code, str(page), "exec"), scope)  # noqa: S102 - our own docs' code
    (desk,) = declared
    listed = list(desk().effects(NOW - timedelta(days=1), NOW))
    assert [(e.provider_id, e.key, e.tool, e.amount, e.offset) for e in listed] == [
        ("cr_1", "ao:t:1", "issue_credit", 1500, ""),
        ("cr_2", "ao:t:2", "issue_credit", 900, "voided"),
    ]
    assert desk.provider == "support" and desk.tools == ("issue_credit",)
