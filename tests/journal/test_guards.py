"""Guards in the database (docs/design.md §6): one live effect per business object."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from journal.leases import lease_acquire
from journal.models import Entry, EntryKind, Step, Task
from journal.outcomes import Outcome
from journal.policy import Policy
from journal.protocols import Call
from journal.record import step_record, task_create
from journal.run import task_advance
from journal.selectors import task_facts
from journal.settle import step_settle
from tests.journal.support import ChargeTool, Provider, ScriptedPlanner, charge, invoice

pytestmark = pytest.mark.usefixtures("committed")


def _leased_task() -> Any:
    task = task_create(kind="renewal", goal="charge")
    lease = lease_acquire(task_id=task.pk, owner=f"runner-{task.pk}")
    assert lease is not None
    return lease


def test_two_concurrent_charges_for_one_invoice_from_two_connections_record_one() -> None:
    inv = invoice()
    tool = ChargeTool(Provider())
    leases = [_leased_task(), _leased_task()]
    barrier = threading.Barrier(2)
    steps: list[Step] = []
    errors: list[BaseException] = []

    def record(lease: Any) -> None:
        try:
            barrier.wait(timeout=10)
            steps.append(step_record(lease=lease, decision=charge(inv), tools={"charge": tool}))
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()  # each thread has its own connection

    threads = [threading.Thread(target=record, args=(lease,)) for lease in leases]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    assert sorted(s.state for s in steps) == ["not_done", "pending"]
    live = Step.objects.filter(guard=f"charge:{inv}", state__in=["pending", "unknown"])
    assert live.count() == 1
    refused = Step.objects.get(guard=f"charge:{inv}", state="not_done")
    assert refused.attempts == 0
    assert refused.outcome["refused_by"] == live.get().key
    assert Entry.objects.filter(step=refused, kind=EntryKind.GUARD_REFUSED).count() == 1


def test_a_second_charge_while_the_first_is_unknown_is_refused_and_waits_for_it() -> None:
    inv = invoice()
    first_tool = ChargeTool(Provider(), script=["timeout_after"])
    first = task_create(kind="renewal", goal="charge")
    waiting = task_advance(
        task_id=first.pk,
        planner=ScriptedPlanner([charge(inv)]),
        tools={"charge": first_tool},
        policy=Policy(lookup_schedule=(3600.0,)),
    )
    assert waiting.stopped == "waiting"

    second_tool = ChargeTool(first_tool.provider)
    second = task_create(kind="renewal", goal="charge again")
    planner = ScriptedPlanner([charge(inv)])
    task_advance(task_id=second.pk, planner=planner, tools={"charge": second_tool})

    assert second_tool.calls == []  # the provider never heard of it
    refused = Step.objects.get(task=second, n=1)
    assert refused.state == "not_done"
    text = task_facts(task=Task.objects.get(pk=second.pk)).steps[0].result_text()
    assert "refused: another charge on " + inv + " is in flight or unknown" in text
    assert Step.objects.get(task=first, n=1).key in text
    # Not "never", but "not until the first is resolved": it waits for the first charge's
    # next lookup, without asking the planner anything more.
    waits = Task.objects.get(pk=second.pk)
    assert waits.status == "waiting"
    assert waits.wake_at is not None
    next_check_at = Step.objects.get(task=first, n=1).next_check_at
    assert next_check_at is not None and waits.wake_at >= next_check_at
    assert len(planner.asked) == 1


def test_once_the_first_settles_another_effect_on_the_object_may_start() -> None:
    inv = invoice()
    tool = ChargeTool(Provider())
    lease_a, lease_b = _leased_task(), _leased_task()
    a = step_record(lease=lease_a, decision=charge(inv), tools={"charge": tool})
    step_settle(step_id=a.pk, outcome=Outcome.not_done("declined"), via="test", lease=lease_a)
    b = step_record(lease=lease_b, decision=charge(inv), tools={"charge": tool})
    assert b.state == "pending"


def test_effects_on_different_objects_do_not_block_each_other() -> None:
    tool = ChargeTool(Provider())
    lease_a, lease_b = _leased_task(), _leased_task()
    a = step_record(lease=lease_a, decision=charge(invoice()), tools={"charge": tool})
    b = step_record(
        lease=lease_b,
        decision=Call("charge", {"invoice": invoice(), "amount": 1}),
        tools={"charge": tool},
    )
    assert a.state == b.state == "pending"


def test_each_claim_table_has_only_the_index_its_guard_reads() -> None:
    """A claim is read by its whole key (the guard's primary key) and by nothing else: an
    index beside it (Django's LIKE index of a CharField key) is written by every once-only
    step and read by no one (journal/migrations/0021)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tablename, indexname FROM pg_indexes WHERE tablename IN "
            "('journal_object_live', 'journal_object_once', 'journal_step_undo') ORDER BY 1"
        )
        indexes = cursor.fetchall()
    assert indexes == [
        ("journal_object_live", "journal_step_one_live_effect_per_object"),
        ("journal_object_once", "journal_step_once_per_object"),
        ("journal_step_undo", "journal_step_one_undo_per_step"),
    ]
