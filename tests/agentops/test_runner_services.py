"""The runner's services in-process: starting, ringing, sweeping, limits, playbooks."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from typing import Any

import django_rq
import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from agentops.doorbell import RANG_KEY
from agentops.effects import task_start
from agentops.kinds import tools_for
from agentops.planners.scripted import ScriptedPlanner as Playbooks
from agentops.runner import task_run, tasks_sweep
from agentops.workers import RUN_JOB
from journal.leases import lease_acquire, lease_release
from journal.models import Entry, EntryKind, Step, Task
from journal.policy import Policy
from journal.protocols import Call, StepFact, TaskFacts
from journal.record import task_create
from journal.run import task_advance
from tests.agentops.test_webhooks import SECRET, event, pending_step, post, sign
from tests.agentops.workers import quiet_world
from tests.databases import flag
from tests.journal.support import ScriptedPlanner, invoice
from tests.sandbox.fixtures import SandboxHandle

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")


@pytest.fixture
def world(on_sandbox: dict[str, Any]) -> Iterator[Any]:
    redis = quiet_world()
    with override_settings(**on_sandbox, TOOL_TIMEOUT_SECONDS=0.5, PLANNER="scripted"):
        yield redis
    redis.flushdb()


def queued_task_ids() -> list[str]:
    """The tasks rung for: the runs the queue holds (not what else it holds)."""
    queue = django_rq.get_queue("default")
    return [job.args[0] for job in queue.get_jobs() if job.func_name == RUN_JOB]


def renewal_refs(**change: Any) -> dict[str, Any]:
    return {"invoice": invoice(), "amount": 4900, "email": "ada@example.com", **change}


def test_start_task_records_the_task_and_rings_once_committed(world: Any) -> None:
    out = io.StringIO()
    refs = {"invoice": "INV-9", "amount": 4900, "email": "ada@example.com"}
    call_command("start_task", "renewal", "--goal", "renew", "--refs", json.dumps(refs), stdout=out)
    task = Task.objects.get(pk=out.getvalue().strip())
    assert task.kind == "renewal" and task.refs == refs
    assert queued_task_ids() == [str(task.pk)]


def test_starting_a_task_is_one_statement_and_one_commit_then_one_ring(world: Any) -> None:
    """Counted by the server (pg_stat_statements, the WAL): a BEGIN/COMMIT pair or a second
    statement added to a task's start shows here, whatever Django's log sees."""
    from devtools.bench.server import ServerCounters
    from tests.databases import owner_connection

    counters = ServerCounters(owner_connection(), role=connection.settings_dict["USER"])
    assert counters.available() is None
    with CaptureQueriesContext(connection) as sent:
        before = counters.mark()
        task = task_start(kind="renewal", goal="renew", refs=renewal_refs(), actor="ada")
        after = counters.mark()
    assert [q["sql"].split("(")[0] for q in sent.captured_queries] == [
        "SELECT journal_task_create"  # the row and its first entry (journal_entry_add)
    ]
    counted = counters.between(before, after)
    assert (counted.statements, counted.commits) == (1, 1), counted
    assert queued_task_ids() == [str(task.pk)]
    stored = Task.objects.get(pk=task.pk)
    assert (stored.status, stored.refs, stored.created_at) == (
        "runnable",
        task.refs,
        task.created_at,
    )
    assert list(Entry.objects.filter(task_id=task.pk).values_list("kind", "actor", "data")) == [
        ("task_created", "ada", {"goal": "renew"})
    ]


def test_a_run_of_two_steps_is_four_round_trips_and_four_commits(world: Any) -> None:
    """A renewal's run as the job makes it (agentops.runner.task_run), counted by the server:
    its lease with what the run is built from; the charge's record; the charge's settlement
    with the receipt's record; the receipt's settlement with the finish. Nothing is read back
    for its metrics and step logs: the moves returned what they wrote (journal/events.py),
    and the run's events tell both steps recorded and settled."""
    from devtools.bench.server import ServerCounters
    from tests.databases import owner_connection

    counters = ServerCounters(owner_connection(), role=connection.settings_dict["USER"])
    task = task_start(kind="renewal", goal="renew", refs=renewal_refs())
    with CaptureQueriesContext(connection) as sent:
        before = counters.mark()
        result = task_run(task_id=task.pk)
        after = counters.mark()
    assert result.stopped == "finished"
    assert [(e.what, e.tool, e.state, e.via) for e in result.events] == [
        ("recorded", "charge_customer", "pending", ""),
        ("settled", "charge_customer", "done", "attempt"),
        ("recorded", "send_email", "pending", ""),
        ("settled", "send_email", "done", "attempt"),
    ]
    assert all(e.seconds is not None for e in result.events if e.what == "settled")

    def named(sql: str) -> str:
        pattern = r"\b(journal_(?!task\b|step\b|entry\b)\w+|UPDATE journal_task)"
        found = re.search(pattern, sql)
        return found[0] if found else sql[:40]

    assert [named(q["sql"]) for q in sent.captured_queries] == [
        "journal_lease_take",  # the lease, returning the task's row
        "journal_record",  # the charge
        "journal_record",  # the charge's settlement, and the receipt
        "journal_finish",  # the receipt's settlement, and the finish
    ]
    counted = counters.between(before, after)
    assert (counted.statements, counted.commits) == (4, 4), counted


def test_a_task_started_inside_a_transaction_is_rung_for_once_that_commits(world: Any) -> None:
    with transaction.atomic():
        task = task_start(kind="renewal", goal="renew", refs=renewal_refs())
        assert queued_task_ids() == []  # not committed yet: nobody may take it up
    assert queued_task_ids() == [str(task.pk)]


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["teleport", "--goal", "x"], "unknown task kind 'teleport'"),
        (["renewal", "--goal", "x", "--refs", "{oops"], "--refs is not JSON"),
        (["renewal", "--goal", "x", "--refs", "[1]"], "--refs must be a JSON object"),
        (
            ["renewal", "--goal", "x", "--refs", '{"invoice": 5}'],
            "the task was not started: refs: 'amount' is a required property; .*"
            "refs.invoice: 5 is not of type 'string'",
        ),
    ],
)
def test_start_task_refuses_bad_input_and_records_nothing(
    world: Any, args: list[str], complaint: str
) -> None:
    before = Task.objects.count()
    with pytest.raises(CommandError, match=complaint):
        call_command("start_task", *args)
    assert Task.objects.count() == before
    assert queued_task_ids() == []


def test_the_sweeper_rings_for_runnable_tasks_once_per_grace_and_again_after_redis_is_lost(
    world: Any,
) -> None:
    task = task_create(kind="renewal", goal="never rung: its job was lost")
    assert tasks_sweep() == 1
    assert queued_task_ids() == [str(task.pk)]
    assert tasks_sweep() == 0  # rung recently: not again
    world.flushdb()  # Redis restarted empty
    assert tasks_sweep() == 1
    # A task some runner holds is not rung for.
    held = task_create(kind="renewal", goal="held")
    assert lease_acquire(task_id=held.pk, owner="someone") is not None
    world.delete(RANG_KEY.format(task.pk))
    assert tasks_sweep() == 1


@override_settings(SWEEP_GRACE_SECONDS=10, SWEEP_BACKOFF_MAX_SECONDS=50)
def test_the_sweeper_backs_off_from_a_task_no_run_takes_and_not_from_one_a_run_took(
    world: Any,
) -> None:
    """Workers stalled: each ring's job waits in the queue. The sweeper rings again (the job
    may have been lost), each time after twice the pause, up to the most; once a run has
    taken the task (its lease token moved), a ring is again worth the plain grace."""
    task = task_create(kind="renewal", goal="its workers are stalled")
    rang = RANG_KEY.format(task.pk)
    pauses = []
    for _ in range(5):
        world.delete(rang)  # the pause ran out (shrunk to nothing: the key is the clock)
        assert tasks_sweep() == 1
        pauses.append(world.pttl(rang) / 1000)
    assert [round(p) for p in pauses] == [10, 20, 40, 50, 50]
    assert queued_task_ids() == [str(task.pk)] * 5  # not one per sweep pass
    assert tasks_sweep() == 0
    # A run takes the task and dies without finishing: the next ring is worth the grace.
    lease = lease_acquire(task_id=task.pk, owner="a run that died")
    assert lease is not None
    lease_release(lease)
    world.delete(rang)
    assert tasks_sweep() == 1
    assert round(world.pttl(rang) / 1000) == 10


def test_a_tool_outside_the_kinds_allowlist_is_an_unknown_tool(world: Any) -> None:
    task = task_create(kind="reminders", goal="remind")
    charge = Call(
        "charge_customer",
        {"invoice": invoice(), "amount": 100, "currency": "usd", "payment_method": "pm_card_visa"},
    )
    task_advance(task_id=task.pk, planner=ScriptedPlanner([charge]), tools=tools_for(task))
    step = Step.objects.get(task=task, n=1)
    assert step.state == "not_done"
    assert "unknown tool 'charge_customer' (this task may use: send_email)" in step.detail


def test_a_task_that_never_finishes_meets_its_step_limit() -> None:
    task = task_create(kind="renewal", goal="loop")
    chatter = [Call("teleport", {}) for _ in range(10)]
    result = task_advance(
        task_id=task.pk, planner=ScriptedPlanner(chatter), tools={}, policy=Policy(max_steps=3)
    )
    task.refresh_from_db()
    assert result.stopped == "needs_human"
    assert task.step_count == 3 and "limit of 3 steps" in task.attention


def test_a_trip_plays_its_four_steps_each_once(
    world: Any,
    payments_sandbox: SandboxHandle,
    mail_sandbox: SandboxHandle,
    bookings_sandbox: SandboxHandle,
) -> None:
    inv = invoice()
    task = task_start(
        kind="trip",
        goal="Lisbon trip",
        refs={
            "invoice": inv,
            "amount": 84000,
            "email": "ada@example.com",
            "flight": "TP1351",
            "traveller": f"Ada {inv}",
            "hotel": "Alfama",
            "check_in": "2027-03-01",
            "check_out": "2027-03-04",
        },
    )
    assert task_run(task_id=task.pk).stopped == "finished"
    steps = list(Step.objects.filter(task=task, kind="call").order_by("n"))
    assert [(s.tool, s.state) for s in steps] == [
        ("hold_flight", "done"),
        ("book_hotel", "done"),
        ("charge_customer", "done"),
        ("send_email", "done"),
    ]
    ledgers = {
        "hold_flight": bookings_sandbox,
        "book_hotel": bookings_sandbox,
        "charge_customer": payments_sandbox,
        "send_email": mail_sandbox,
    }
    for step in steps:
        assert len(ledgers[step.tool].client.ledger(key=step.key)) == 1


def test_reminders_send_one_email_per_overdue_invoice(
    world: Any, mail_sandbox: SandboxHandle
) -> None:
    overdue = [{"invoice": invoice(), "email": f"c{i}@example.com"} for i in range(3)]
    task = task_start(kind="reminders", goal="chase", refs={"invoices": overdue})
    assert task_run(task_id=task.pk).stopped == "finished"
    sent = Step.objects.filter(task=task, tool="send_email", state="done")
    assert sorted(s.args["reference"] for s in sent) == sorted(i["invoice"] for i in overdue)
    assert all(len(mail_sandbox.client.ledger(key=s.key)) == 1 for s in sent)


def test_the_scripted_planner_rephrases_when_asked_the_same_thing_twice() -> None:
    facts = TaskFacts(
        task_id="t",
        kind="renewal",
        goal="g",
        refs={"invoice": "INV-1", "amount": 4900, "email": "a@b.co"},
        steps=[],
    )
    planner = Playbooks()
    first, again = planner.decide(facts), planner.decide(facts)
    assert isinstance(first, Call) and isinstance(again, Call)
    assert first.args["amount"] == 4900 and again.args["amount"] == "49.00"


def test_a_declined_renewal_emails_a_notice_instead_of_a_receipt() -> None:
    facts = TaskFacts(
        task_id="t",
        kind="renewal",
        goal="g",
        refs={"invoice": "INV-1", "amount": 4900, "email": "a@b.co"},
        steps=[
            StepFact(
                n=1,
                tool="charge_customer",
                args={},
                state="not_done",  # type: ignore[arg-type]
                detail="the provider refused it (HTTP 402 card_declined)",
                key="k",
            )
        ],
    )
    decision = Playbooks().decide(facts)
    assert isinstance(decision, Call) and decision.args["subject"] == "Payment failed for INV-1"
    refused = TaskFacts(
        task_id="t",
        kind="renewal",
        goal="g",
        refs=facts.refs,
        steps=[
            StepFact(
                n=1,
                tool="charge_customer",
                args={},
                state="not_done",  # type: ignore[arg-type]
                detail="refused: another charge_customer on INV-1 …",
                key="k",
                refusal="in_flight",
            )
        ],
    )
    assert Playbooks().decide(refused).summary.startswith("another charge for INV-1")  # type: ignore[union-attr]


def test_a_planner_that_cannot_be_reached_hands_the_task_to_a_human(world: Any) -> None:
    task = task_start(kind="renewal", goal="renew", refs=renewal_refs())
    with override_settings(
        PLANNER="anthropic",
        ANTHROPIC_API_KEY="k",
        ANTHROPIC_BASE_URL="http://127.0.0.1:9",
        PLANNER_TIMEOUT_SECONDS=0.5,
    ):
        assert task_run(task_id=task.pk).stopped == "needs_human"
    task.refresh_from_db()
    assert task.status == "needs_human" and task.attention.startswith("the planner failed")
    assert not Step.objects.filter(task=task).exists()  # nothing was decided, nothing ran


def test_a_webhook_that_settles_a_waiting_step_rings_for_its_task(world: Any) -> None:
    step = pending_step()
    task = Task.objects.get(pk=step.task_id)
    with override_settings(STRIPE_WEBHOOK_SECRET=SECRET):
        payload = event("payment_intent.succeeded", step, status="succeeded")
        assert post(payload, sign(payload)).status_code == 200
    assert queued_task_ids() == [str(task.pk)]
    assert Entry.objects.filter(step=step, kind=EntryKind.WEBHOOK_RECEIVED).exists()


def test_an_operator_resumes_or_cancels_a_flagged_task_from_the_command_line(
    world: Any,
) -> None:
    task = task_start(kind="renewal", goal="renew", refs=renewal_refs())
    world.flushdb()
    flag(task.pk, "parked", "set aside")
    out = io.StringIO()
    call_command(
        "resume_task", str(task.pk), "--by", "ops@example.com", "--reason", "checked", stdout=out
    )
    assert out.getvalue().strip() == f"task {task.pk} is runnable now"
    assert queued_task_ids() == [str(task.pk)]  # rung for once the resume was committed
    flag(task.pk, "parked", "again")
    call_command("cancel_task", str(task.pk), "--by", "ops@example.com", "--reason", "withdrawn")
    assert Task.objects.get(pk=task.pk).status == "cancelled"
    with pytest.raises(CommandError, match="is cancelled; only a task that needs a human"):
        call_command("cancel_task", str(task.pk), "--by", "ops", "--reason", "again")
    with pytest.raises(CommandError, match="no such task"):
        call_command("resume_task", "not-a-task", "--by", "ops", "--reason", "x")
