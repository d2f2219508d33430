"""The saga mechanism in the core (journal/sagas.py): unwinding from the journal's facts,
and approvals bound to one held step — with an in-process provider and the database."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from django.db import connection

from journal.keys import undo_key
from journal.leases import lease_acquire
from journal.models import Approval, Step, Task
from journal.operator import approval_approve, approval_reject, task_cancel
from journal.outcomes import StepState
from journal.policy import Policy
from journal.protocols import Bound, Call, Refused, StepFact, TaskFacts
from journal.record import step_record, task_create
from journal.run import task_advance
from journal.sagas import ApprovalNotUsable, Undo, UndoFailed, UndoLater, next_undo
from journal.status import TransitionRefused
from tests.journal.support import ChargeTool, Provider, ScriptedPlanner, charge, invoice

pytestmark = pytest.mark.usefixtures("committed")


@dataclass
class SagaRules:
    """A saga of ``charge`` steps, each undone by ``refund``; ``held`` tools wait for a person."""

    held: tuple[str, ...] = ()
    saga: bool = True
    closes: Call | None = None

    def check(self, *, tool: str, args: Mapping[str, Any], facts: TaskFacts) -> Refused | Bound:
        return Bound()

    def hold(self, *, tool: str, args: Mapping[str, Any], facts: TaskFacts) -> str | None:
        return f"{tool} waits for a person" if tool in self.held else None

    def verify_before(self, *, tool: str) -> bool:
        return False

    def closing(self, *, facts: TaskFacts) -> Call | None:
        return self.closes


def world() -> tuple[Provider, dict[str, Any]]:
    provider = Provider()
    tools: dict[str, Any] = {
        "charge": ChargeTool(provider, compensation="refund"),
        "refund": ChargeTool(provider, name="refund"),
    }
    return provider, tools


def saga_task() -> Task:
    return task_create(kind="trip", goal="saga", plan=[{"tool": "charge"}])


def test_a_saga_step_that_cannot_happen_undoes_the_done_ones_newest_first() -> None:
    provider, tools = world()
    tools["charge"].script = ["ok", "ok", "refuse"]
    task = saga_task()
    a, b, c = invoice(), invoice(), invoice()
    result = task_advance(
        task_id=task.pk,
        planner=ScriptedPlanner([charge(a), charge(b), charge(c)]),
        tools=tools,
        rules=SagaRules(),
    )
    assert result.stopped == "compensated"
    made = {s.n: s for s in Step.objects.filter(task=task, kind="call")}
    assert [(s.tool, s.state) for s in made.values()] == [
        ("charge", "done"),
        ("charge", "done"),
        ("charge", "not_done"),
        ("refund", "done"),  # undoes step 2 (the newest) first
        ("refund", "done"),
    ]
    assert made[4].offsets_id == made[2].pk and made[4].key == undo_key(made[2].key)
    assert made[5].offsets_id == made[1].pk
    # The harness mapped each effect's evidence to its undo; no planner was asked.
    assert made[4].args["undoes"] == made[2].evidence["id"]
    assert made[4].decision == {"harness": "undo", "of": 2}
    keys = [e.key for e in provider.ledger]
    assert keys == [made[1].key, made[2].key, made[4].key, made[5].key]
    assert Task.objects.get(pk=task.pk).unwinding is True


def test_a_compensated_saga_makes_its_closing_call_once_retrying_it_only_if_never_sent() -> None:
    provider, tools = world()
    tools["tell"] = ChargeTool(provider, name="tell", irreversible=True)
    tools["charge"].script = ["ok", "refuse"]
    tools["tell"].script = ["not_sent", "ok"]  # the mail provider is down, then back
    told = Call("tell", {"invoice": invoice(), "amount": 1}, raw={"harness": "closing"})
    rules = SagaRules(closes=told)
    task = saga_task()
    planner = ScriptedPlanner([charge(invoice()), charge(invoice())])
    policy = Policy(transient_retry_delays=(0.0,))
    result = task_advance(task_id=task.pk, planner=planner, tools=tools, rules=rules, policy=policy)
    assert result.stopped == "compensated"
    made = list(Step.objects.filter(task=task, kind="call").order_by("n"))
    assert [(s.tool, s.state) for s in made] == [
        ("charge", "done"),
        ("charge", "not_done"),
        ("refund", "done"),
        ("tell", "not_done"),  # never sent: tried again, with a new key
        ("tell", "done"),
    ]
    assert made[3].decision == {"harness": "closing"}
    assert made[4].decision == {"harness": "closing", "of": 4} and made[4].retries == 1
    assert made[4].key != made[3].key and made[4].args == told.args
    assert len(tools["tell"].calls) == 2 and provider.ledger[-1].key == made[4].key
    # Run again: it was made; nothing more.
    again = task_advance(task_id=task.pk, planner=planner, tools=tools, rules=rules, policy=policy)
    assert again.stopped == "compensated" and len(tools["tell"].calls) == 2


def test_a_held_step_is_recorded_exactly_as_approved_and_the_approval_is_used_once() -> None:
    _, tools = world()
    task = saga_task()
    planner = ScriptedPlanner([charge(invoice())])
    assert (
        task_advance(
            task_id=task.pk, planner=planner, tools=tools, rules=SagaRules(("charge",))
        ).stopped
        == "awaiting_approval"
    )
    held = Approval.objects.get(task=task)
    assert re.fullmatch("[0-9a-f]{64}", held.digest)  # of its tool and arguments
    with pytest.raises(TransitionRefused, match="approve what is shown now"):
        approval_approve(task_id=task.pk, approval_id=held.pk, digest="0" * 64, actor="ops")
    assert Approval.objects.get(pk=held.pk).state == "pending"

    assert approval_approve(task_id=task.pk, approval_id=held.pk, digest=held.digest, actor="ops")
    result = task_advance(
        task_id=task.pk, planner=planner, tools=tools, rules=SagaRules(("charge",))
    )
    assert result.stopped == "finished"
    held.refresh_from_db()
    step = Step.objects.get(task=task, n=1)
    assert held.state == "used" and held.used_by_id == step.pk and step.args == held.args
    assert len(planner.asked) == 2  # asked once before the hold, once to finish after it
    with pytest.raises(TransitionRefused, match="nothing to decide"):
        approval_approve(task_id=task.pk, approval_id=held.pk, digest=held.digest, actor="ops")


def test_an_approval_cannot_be_used_for_another_call_or_twice() -> None:
    _, tools = world()
    task = saga_task()
    inv = invoice()
    planner = ScriptedPlanner([charge(inv)])
    rules = SagaRules(("charge",))
    assert task_advance(task_id=task.pk, planner=planner, tools=tools, rules=rules).stopped == (
        "awaiting_approval"
    )
    approval = Approval.objects.get(task=task)
    assert approval_approve(
        task_id=task.pk, approval_id=approval.pk, digest=approval.digest, actor="ops"
    )
    lease = lease_acquire(task_id=task.pk, owner="r")
    assert lease is not None
    with pytest.raises(ApprovalNotUsable):
        step_record(lease=lease, decision=charge(inv, amount=1), tools=tools, approval=approval)
    assert not Step.objects.filter(task=task).exists()  # refused whole: nothing recorded
    step = step_record(lease=lease, decision=charge(inv), tools=tools, approval=approval)
    assert Approval.objects.get(pk=approval.pk).used_by_id == step.pk
    with pytest.raises(ApprovalNotUsable):
        step_record(lease=lease, decision=charge(invoice()), tools=tools, approval=approval)


def test_an_expired_request_is_not_approved_and_the_saga_asks_again() -> None:
    _, tools = world()
    task = saga_task()
    planner = ScriptedPlanner([charge(invoice())])
    rules = SagaRules(("charge",))
    task_advance(
        task_id=task.pk, planner=planner, tools=tools, rules=rules, policy=Policy(approval_ttl=0)
    )
    held = Approval.objects.get(task=task)
    assert not approval_approve(
        task_id=task.pk, approval_id=held.pk, digest=held.digest, actor="ops"
    )
    assert Approval.objects.get(pk=held.pk).state == "expired"
    assert Task.objects.get(pk=task.pk).status == "runnable"
    task_advance(task_id=task.pk, planner=planner, tools=tools, rules=rules)
    again = Approval.objects.get(task=task, state="pending")
    assert again.pk != held.pk and again.digest == held.digest


def test_a_rejected_step_never_runs_and_the_saga_compensates() -> None:
    provider, tools = world()
    task = saga_task()
    planner = ScriptedPlanner([charge(invoice()), charge(invoice(), amount=99)])
    rules = SagaRules()
    # The second charge is the one held: hold only amounts of 99.
    rules.hold = lambda *, tool, args, facts: "big" if args.get("amount") == 99 else None  # type: ignore[method-assign]
    task_advance(task_id=task.pk, planner=planner, tools=tools, rules=rules)
    held = Approval.objects.get(task=task)
    with pytest.raises(TransitionRefused, match="say why"):
        approval_reject(task_id=task.pk, approval_id=held.pk, actor="ops", reason=" ")
    approval_reject(task_id=task.pk, approval_id=held.pk, actor="ops", reason="no")
    assert task_advance(task_id=task.pk, planner=planner, tools=tools, rules=rules).stopped == (
        "compensated"
    )
    assert [(s.tool, s.state) for s in Step.objects.filter(task=task).exclude(kind="finish")] == [
        ("charge", "done"),
        ("refund", "done"),
    ]
    assert [e.key.endswith(":undo") for e in provider.ledger] == [False, True]


def test_a_saga_with_effects_standing_is_compensated_not_cancelled() -> None:
    _, tools = world()
    task = saga_task()
    lease = lease_acquire(task_id=task.pk, owner="r")
    assert lease is not None
    from journal.perform import step_perform
    from journal.status import task_flag

    step = step_record(lease=lease, decision=charge(invoice()), tools=tools)
    step_perform(lease=lease, step=step, tool=tools["charge"])
    task_flag(lease=lease, code="parked", reason="stop")  # type: ignore[arg-type]
    with pytest.raises(TransitionRefused, match="compensate the saga rather than cancel it"):
        task_cancel(task_id=task.pk, actor="ops", reason="stop it")


def test_the_app_role_writes_no_approval_plan_or_unwinding() -> None:
    """What an approval approves, a saga's plan and its unwinding are written by the journal's
    functions alone (journal_approval_request, journal_task_create, journal_saga_unwound)."""
    task = saga_task()
    with (
        psycopg.connect(**connection.get_connection_params(), autocommit=True) as app,
    ):
        for statement in (
            "UPDATE journal_approval SET args = '{}'::jsonb WHERE task_id = %s",
            "INSERT INTO journal_approval (task_id, tool, args, digest, reason, expires_at, "
            "state, decided_by, decision_reason, requested_at) "
            "VALUES (%s, 'charge', '{}', 'x', 'r', now(), 'approved', '', '', now())",
            "UPDATE journal_task SET plan = '[]'::jsonb WHERE id = %s",
            "UPDATE journal_task SET unwinding = true WHERE id = %s",
            "DELETE FROM journal_approval WHERE task_id = %s",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                app.execute(statement, [task.pk])


# --- What unwinding does next, as a table --------------------------------------------------

T0 = datetime(2026, 11, 30, tzinfo=UTC)


def fact(n: int, **kw: Any) -> StepFact:
    base: dict[str, Any] = {
        "tool": "charge",
        "args": {},
        "state": StepState.DONE,
        "detail": "",
        "key": f"k{n}",
        "undo_tool": "refund",
        "settled_at": T0 + timedelta(minutes=n),
    }
    return StepFact(n=n, **{**base, **kw})


def test_undo_order_follows_completion_and_skips_what_cannot_or_need_not_be_undone() -> None:
    policy = Policy(transient_retry_delays=(5.0,))
    # Step 2 completed after step 3 (a late lookup): it is undone first.
    two, three = fact(2, settled_at=T0 + timedelta(hours=1)), fact(3)
    email = fact(4, tool="email", undo_tool="")
    assert next_undo([fact(1), two, three, email], policy) == Undo(two)
    undone = fact(5, tool="refund", undo_tool="", offsets=2)
    two_undone = fact(2, settled_at=T0 + timedelta(hours=1), offset=True)
    assert next_undo([fact(1), two_undone, three, email, undone], policy) == Undo(three)
    never_sent = fact(
        6, tool="refund", undo_tool="", offsets=3, state=StepState.NOT_DONE, transient=True
    )
    later = next_undo([fact(1), two_undone, three, undone, never_sent], policy)
    assert later == UndoLater(three, 1, T0 + timedelta(minutes=6, seconds=5))
    refused = fact(6, tool="refund", undo_tool="", offsets=3, state=StepState.NOT_DONE)
    failed = next_undo([fact(1), two_undone, three, undone, refused], policy)
    assert isinstance(failed, UndoFailed) and "the effect still stands" in failed.why
    not_done = fact(1, state=StepState.NOT_DONE)
    assert next_undo([not_done, email], policy) is None
