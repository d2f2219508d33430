"""A task waiting on another task's unknown effect says so, links to it, and is flagged with it
when that effect goes to a person (issue 38).

Under a kill loop, a second task for the same invoice was refused by the guard while its
sibling's effect was unknown, and went on waiting without a word after that effect went to a
person: only the sibling was flagged. Now the waiting task's page and row say what it waits
for, with a link; it is in the operators' "needs attention" filter, count and panel while the
holder is with a person; and once a person resolves the holder, it wakes and decides as before.

Real PostgreSQL, the real tools and a kind's real rules against the sandbox providers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agentops.api.selectors import task_out
from agentops.effects import task_start
from agentops.operators.selectors import ListQuery, task_counts, task_list, task_page
from agentops.operators.services import task_resume
from journal.leases import lease_acquire, lease_release
from journal.models import Attention, Step, Task
from journal.outcomes import Outcome
from journal.policy import Policy
from journal.record import step_record, task_create
from journal.settle import step_mark_unknown
from journal.status import task_flag
from tests.agentops.test_business_effects import charges_of, renewal_refs, run
from tests.agentops.test_operators import client_for, user
from tests.agentops.workers import quiet_world
from tests.databases import flag
from tests.journal.support import ChargeTool, Provider, charge, invoice
from tests.sandbox.fixtures import SandboxHandle, wait_for

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")

SOON = Policy(lookup_schedule=(0.0, 0.0, 0.0, 0.0), max_steps=10)
BACKING_OFF = Policy(lookup_schedule=(0.2, 0.4, 0.8), max_steps=10)


@pytest.fixture
def world(committed: None, on_sandbox: dict[str, Any]) -> Iterator[None]:
    redis = quiet_world()
    with override_settings(**on_sandbox, TOOL_TIMEOUT_SECONDS=1.0, PLANNER="scripted"):
        yield
    redis.flushdb()


def blocked_by_a_flagged_charge(payments: SandboxHandle) -> tuple[str, Task, Task]:
    """A renewal whose charge is unknown, handed to a person; and a second renewal of the
    same invoice, refused by the guard meanwhile and waiting."""
    inv = invoice()
    first = task_start(kind="renewal", goal="renew", refs=renewal_refs(inv))
    payments.client.fault("payment_intents.create", "latency_after_effect", delay=1.5)
    assert run(first, policy=Policy(lookup_schedule=(30.0,), max_steps=10)).stopped == "waiting"
    assert Step.objects.get(task=first, tool="charge_customer").state == "unknown"
    assert flag(first.pk, "parked", "an operator looks into it")
    second = task_start(kind="renewal", goal="renew again", refs=renewal_refs(inv))
    assert run(second, policy=BACKING_OFF).stopped == "waiting"
    [refused] = Step.objects.filter(task=second, tool="charge_customer")
    assert refused.refusal == "in_flight"
    return inv, first, second


@pytest.mark.usefixtures("world")
def test_a_task_blocked_by_a_flagged_effect_says_so_is_flagged_with_it_and_finishes_after(
    payments_sandbox: SandboxHandle,
) -> None:
    inv, first, second = blocked_by_a_flagged_charge(payments_sandbox)
    holder = Step.objects.get(task=first, tool="charge_customer")

    # Its page says what it waits for, links to the holder, and says it is with a person.
    page = task_page(task_id=second.pk)
    assert page.waiting_for is not None
    assert (page.waiting_for.task, page.waiting_for.tool) == (first.pk, "charge_customer")
    assert page.waiting_for.state == "unknown" and page.waiting_for.needs_person
    c = client_for(user("Operators"))
    html = c.get(f"/tasks/{second.pk}").content.decode()
    assert 'id="waiting-for"' in html
    assert f'href="/tasks/{first.pk}"' in html
    assert (
        "waits for a person&#x27;s decision on" in html or "waits for a person's decision" in html
    )
    assert f"charge_customer on {holder.guard}, which is unknown, with a person" in html

    # It is in the operators' "needs attention" filter, count and panel with its holder.
    flagged = task_list(query=ListQuery(state="attention"), page=1)
    listed = {t.pk for t in flagged.page.object_list}
    assert {first.pk, second.pk} <= listed
    assert task_counts()["attention"] >= 2
    everything = task_list()
    assert second.pk in {t.pk for t in everything.attention}
    row = c.get("/").content.decode()
    assert "waits for a person&#x27;s decision on" in row or "waits for a person's decision" in row
    assert f'href="/tasks/{first.pk}"' in row
    # The HTTP API's task says so too.
    out = task_out(task_id=second.pk)
    assert out.waiting_for is not None
    assert (out.waiting_for.task, out.waiting_for.state, out.waiting_for.with_person) == (
        first.pk,
        "unknown",
        True,
    )

    # A person resumes the holder: it looks its charge up, finds it done and finishes.
    task_resume(task_id=first.pk, actor="op", reason="the provider answers again")
    wait_for(
        lambda: run(first, policy=SOON).stopped == "finished",
        timeout=30,
        what="the first renewal to find its charge and finish",
    )
    assert Step.objects.get(pk=holder.pk).state == "done"
    # The waiting task is no longer flagged, and wakes and decides: already done.
    assert second.pk not in {
        t.pk for t in task_list(query=ListQuery(state="attention")).page.object_list
    }
    assert task_page(task_id=second.pk).waiting_for is None
    wait_for(
        lambda: run(second, policy=BACKING_OFF).stopped == "finished",
        timeout=30,
        what="the second renewal to wake and decide",
    )
    again = Step.objects.filter(task=second, tool="charge_customer").order_by("n").last()
    assert again is not None and (again.state, again.refusal) == ("not_done", "already_done")
    assert len(charges_of(payments_sandbox, inv)) == 1  # one effect, never twice


@pytest.mark.usefixtures("world")
def test_a_task_waiting_on_an_effect_nobody_was_asked_about_is_not_flagged(
    payments_sandbox: SandboxHandle,
) -> None:
    """While the holder's task is only waiting for its own lookup, the blocked task says what
    it waits for, but needs nobody."""
    inv = invoice()
    first = task_start(kind="renewal", goal="renew", refs=renewal_refs(inv))
    payments_sandbox.client.fault("payment_intents.create", "latency_after_effect", delay=1.5)
    assert run(first, policy=Policy(lookup_schedule=(30.0,), max_steps=10)).stopped == "waiting"
    second = task_start(kind="renewal", goal="renew again", refs=renewal_refs(inv))
    assert run(second, policy=BACKING_OFF).stopped == "waiting"
    page = task_page(task_id=second.pk)
    assert page.waiting_for is not None and not page.waiting_for.with_person
    assert page.waiting_for.words == "unknown"
    assert second.pk not in {
        t.pk for t in task_list(query=ListQuery(state="attention")).page.object_list
    }
    row = client_for(user("Operators")).get(f"/?q={inv}").content.decode()
    assert "which is unknown</span>" in row and f'href="/tasks/{first.pk}"' in row


def _queries(c: Client, path: str) -> int:
    with CaptureQueriesContext(connection) as seen:
        assert c.get(path).status_code == 200
    return len(seen.captured_queries)


def test_the_list_costs_the_same_statements_however_many_tasks_wait() -> None:
    """What each row waits for is read in the row's own query: no statement per row."""
    inv = invoice()
    holder = task_create(kind="renewal", goal="charge", refs={"invoice": inv})
    lease = lease_acquire(task_id=holder.pk, owner="test")
    assert lease is not None
    tools = {"charge": ChargeTool(Provider())}
    step = step_record(lease=lease, decision=charge(inv), tools=tools)
    step_mark_unknown(
        lease=lease, step=step, outcome=Outcome.unknown("timed out"), next_check_in=3600
    )
    task_flag(lease=lease, code=Attention.KEY_DEAD, reason="key died", step_id=step.pk)
    lease_release(lease)

    def blocked() -> Task:
        task = task_create(kind="renewal", goal="charge again", refs={"invoice": inv})
        held = lease_acquire(task_id=task.pk, owner="test")
        assert held is not None
        refused = step_record(lease=held, decision=charge(inv), tools=tools)
        assert refused.refusal == "in_flight"
        lease_release(held)
        return task

    c = client_for(user("Operators"))
    first = blocked()
    c.get("/")  # session and permission caches warm
    costs = {path: _queries(c, path) for path in ("/", "/?state=attention", "/?sort=stuck")}
    more = [blocked() for _ in range(3)]
    assert {path: _queries(c, path) for path in costs} == costs
    shown = task_list(query=ListQuery(state="attention"))
    assert {holder.pk, first.pk, *(t.pk for t in more)} <= {t.pk for t in shown.page.object_list}
    html = c.get(f"/tasks/{first.pk}").content.decode()
    assert f'href="/tasks/{holder.pk}"' in html and "which is unknown, with a person" in html


# --- Woken at once when a person resolves the holder ------------------------------------------

HOUR = 3600.0


def _rung(task_id: Any) -> bool:
    """Whether a run of the task is in the run queue now (rung, not scheduled)."""
    from agentops.doorbell import run_queue

    return any(list(job.args) == [str(task_id)] for job in run_queue().jobs)


def _held_for_an_hour(payments: SandboxHandle) -> tuple[str, Task, Task, Step]:
    """As :func:`blocked_by_a_flagged_charge`, run as a worker runs them (agentops.runner,
    its policy from the settings), with every lookup delay an hour: the waiting task's
    backed-off time is an hour away, so only a wake can run it sooner."""
    from agentops.runner import task_run

    inv = invoice()
    first = task_start(kind="renewal", goal="renew", refs=renewal_refs(inv))
    payments.client.fault("payment_intents.create", "latency_after_effect", delay=1.5)
    assert task_run(task_id=first.pk).stopped == "waiting"
    holder = Step.objects.get(task=first, tool="charge_customer")
    assert holder.state == "unknown"
    assert flag(first.pk, "parked", "an operator looks into it")
    second = task_start(kind="renewal", goal="renew again", refs=renewal_refs(inv))
    assert task_run(task_id=second.pk).stopped == "waiting"
    second.refresh_from_db()
    assert second.wake_at is not None
    assert (second.wake_at - timezone.now()).total_seconds() > HOUR - 60
    assert task_run(task_id=second.pk).stopped == "waiting"  # its time has not come
    return inv, first, second, holder


def _finishes_at_once(payments: SandboxHandle, inv: str, second: Task) -> None:
    from agentops.runner import task_run

    assert Task.objects.get(pk=second.pk).status == "runnable"
    assert _rung(second.pk)
    assert task_run(task_id=second.pk).stopped == "finished"
    again = Step.objects.filter(task=second, tool="charge_customer").order_by("n").last()
    assert again is not None and (again.state, again.refusal) == ("not_done", "already_done")
    assert len(charges_of(payments, inv)) == 1  # one effect, never twice


@pytest.mark.usefixtures("world")
@override_settings(RECONCILE_SCHEDULE=[HOUR])
def test_a_waiting_task_wakes_at_once_when_a_person_settles_the_holder_by_hand(
    payments_sandbox: SandboxHandle,
) -> None:
    from agentops.decisions import decision_apply
    from agentops.operators.services import step_resolve

    inv, first, second, holder = _held_for_an_hour(payments_sandbox)
    [made] = charges_of(payments_sandbox, inv)
    decision = step_resolve(
        step_id=holder.pk,
        actor="ada",
        done=True,
        evidence=made["object_id"],
        reason="the dashboard shows the payment",
    )
    # Recorded by the web server: nothing wakes until a worker applies it.
    assert Task.objects.get(pk=second.pk).status == "waiting"
    assert decision_apply(decision_id=decision).startswith("settled")
    _finishes_at_once(payments_sandbox, inv, second)
    woken = second.entries.filter(kind="task_resumed", data__to="runnable").last()
    assert woken is not None and woken.actor == "ada"
    assert holder.key in str(woken.data)


@pytest.mark.usefixtures("world")
@override_settings(RECONCILE_SCHEDULE=[HOUR])
def test_a_waiting_task_wakes_at_once_when_a_lookup_a_person_asked_for_settles_the_holder(
    payments_sandbox: SandboxHandle,
) -> None:
    from agentops.operators.services import steps_reconcile_now
    from agentops.runner import task_run

    inv, first, second, holder = _held_for_an_hour(payments_sandbox)
    steps_reconcile_now(step_ids=[holder.pk], actor="ada", reason="ask again now")
    assert Task.objects.get(pk=second.pk).status == "waiting"  # the holder is not settled yet
    assert task_run(task_id=first.pk).stopped == "finished"
    assert Step.objects.get(pk=holder.pk).state == "done"
    _finishes_at_once(payments_sandbox, inv, second)


@pytest.mark.usefixtures("world")
@override_settings(RECONCILE_SCHEDULE=[HOUR])
def test_a_waiting_task_wakes_at_once_when_a_providers_report_settles_the_holder(
    payments_sandbox: SandboxHandle,
) -> None:
    """What a provider's notification applies (``agentops.effects.step_settle``, as every
    applier settles) wakes the tasks waiting on the step too."""
    from agentops.effects import step_settle

    inv, first, second, holder = _held_for_an_hour(payments_sandbox)
    [made] = charges_of(payments_sandbox, inv)
    evidence = {"payment_intent": made["object_id"]}
    assert step_settle(
        step_id=holder.pk, outcome=Outcome.done(evidence), via="webhook", actor="stripe"
    )
    _finishes_at_once(payments_sandbox, inv, second)
