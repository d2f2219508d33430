"""A person's decisions the pages offer, and their rules (journal/operator.py): an approval
with its reason and the exact call, a late effect corrected and undone through the same
keyed, journaled undo as any compensation, and the sentences that say why an action is
refused — one rule for the service and for the page that offers it."""

from __future__ import annotations

from typing import Any

import pytest

from journal.keys import undo_key
from journal.leases import lease_acquire, lease_release
from journal.models import Approval, Entry, EntryKind, Step, Task
from journal.operator import (
    approval_approve,
    approval_reject,
    cancel_refusal,
    compensate_refusal,
    correction_refusal,
    decision_apply,
    saga_compensate,
    step_correct,
    step_resolve,
    task_cancel,
    task_resume,
)
from journal.outcomes import Outcome
from journal.record import step_record, task_create
from journal.run import task_advance
from journal.settle import step_settle
from journal.status import TransitionRefused
from tests.databases import flag
from tests.journal.support import ChargeTool, Provider, ScriptedPlanner, charge, invoice
from tests.journal.test_sagas import SagaRules, saga_task, world

pytestmark = pytest.mark.usefixtures("committed")


def resolve(**decided: Any) -> str:
    """A person settles a step by hand: the decision recorded, then applied (a worker's part)."""
    return decision_apply(decision_id=step_resolve(**decided))


def correct(**decided: Any) -> Step:
    """A person's correction, recorded, then applied (a worker's part): the correction."""
    said = decision_apply(decision_id=step_correct(**decided))
    assert said.startswith("corrected as step "), said
    step = Step.objects.get(pk=decided["step_id"])
    return Step.objects.get(task_id=step.task_id, n=int(said.removeprefix("corrected as step ")))


def tools_of(provider: Provider, *, once: bool = True) -> dict[str, Any]:
    return {
        "charge": ChargeTool(provider, compensation="refund", once_per_object=once),
        "refund": ChargeTool(provider, name="refund"),
    }


def late_charge(
    provider: Provider, tools: dict[str, Any], inv: str | None = None, *, cancel: bool = True
) -> Step:
    """A charge settled not done by hand, its task cancelled (or, with ``cancel`` false, left
    with the person); then the charge lands at the provider and its report contradicts the
    journal: a conflict, the task with a person."""
    task = task_create(kind="renewal", goal="renew", refs={"invoice": inv or invoice()})
    lease = lease_acquire(task_id=task.pk, owner="runner")
    assert lease is not None
    step = step_record(lease=lease, decision=charge(task.refs["invoice"]), tools=tools)
    lease_release(lease)
    flag(task.pk, reason="the charge timed out and the lookups found nothing")
    resolve(step_id=step.pk, actor="ops", done=False, reason="nothing at the provider")
    if cancel:
        task_cancel(task_id=task.pk, actor="ops", reason="the customer gave up")
    landed = provider.apply(step.key, step.args)  # the charge that was late
    step_settle(
        step_id=step.pk,
        outcome=Outcome.done({"id": landed.id}, "payment succeeded"),  # type: ignore[union-attr]
        via="webhook",
        actor="provider",
    )
    flagged = Task.objects.get(pk=task.pk)
    assert flagged.status == "needs_human" and flagged.attention_code == "conflict"
    return Step.objects.get(pk=step.pk)


def test_an_approval_records_who_when_why_the_digest_and_the_exact_call() -> None:
    _, tools = world()
    task = saga_task()
    task_advance(
        task_id=task.pk,
        planner=ScriptedPlanner([charge(invoice())]),
        tools=tools,
        rules=SagaRules(("charge",)),
    )
    held = Approval.objects.get(task=task)
    assert approval_approve(
        task_id=task.pk, approval_id=held.pk, digest=held.digest, actor="ada", reason=" ok'd "
    )
    held.refresh_from_db()
    assert (held.decided_by, held.decision_reason) == ("ada", "ok'd")
    assert held.decided_at is not None
    decided = Entry.objects.get(task=task, kind=EntryKind.APPROVAL_DECIDED)
    assert decided.actor == "ada"
    assert decided.data["reason"] == "ok'd" and decided.data["digest"] == held.digest
    assert (decided.data["tool"], decided.data["args"]) == ("charge", held.args)


def test_an_approval_needs_no_reason_and_a_rejection_says_what_it_rejected() -> None:
    _, tools = world()
    task = saga_task()
    rules = SagaRules(("charge",))
    task_advance(
        task_id=task.pk, planner=ScriptedPlanner([charge(invoice())]), tools=tools, rules=rules
    )
    held = Approval.objects.get(task=task)
    approval_reject(task_id=task.pk, approval_id=held.pk, actor="bob", reason="too much")
    rejected = Entry.objects.get(task=task, kind=EntryKind.APPROVAL_DECIDED)
    assert rejected.data["decision"] == "rejected" and rejected.data["reason"] == "too much"
    assert rejected.data["args"] == held.args and rejected.data["digest"] == held.digest

    other = saga_task()
    task_advance(
        task_id=other.pk, planner=ScriptedPlanner([charge(invoice())]), tools=tools, rules=rules
    )
    again = Approval.objects.get(task=other)
    assert approval_approve(task_id=other.pk, approval_id=again.pk, digest=again.digest, actor="x")
    entry = Entry.objects.get(task=other, kind=EntryKind.APPROVAL_DECIDED)
    assert "reason" not in entry.data and Approval.objects.get(pk=again.pk).decision_reason == ""


def test_a_late_charge_is_corrected_and_refunded_by_the_same_keyed_undo() -> None:
    provider = Provider()
    tools = tools_of(provider)
    late = late_charge(provider, tools, cancel=False)
    landed = provider.find(late.key)
    assert landed is not None
    correction = correct(
        step_id=late.pk,
        actor="ada",
        evidence={"id": landed.id},
        reason="the provider shows the charge",
        tools=tools,
    )
    # The settled step never moved; the correction is a step of its own, done, naming it.
    assert Step.objects.get(pk=late.pk).state == "not_done"
    assert correction.state == "done" and correction.evidence == {"id": landed.id}
    assert (correction.tool, correction.args) == (late.tool, late.args)
    assert correction.decision == {"harness": "correction", "of": late.n}
    assert correction.once is True and correction.undo_tool == "refund"
    task = Task.objects.get(pk=late.task_id)
    assert task.status == "needs_human" and task.attention_code == "conflict"
    assert f"corrected it as step {correction.n}" in task.attention
    assert task.lease_expires_at is None and task.failed_runs == 0
    action = Entry.objects.get(task=task, kind=EntryKind.OPERATOR_ACTION, data__action="correct")
    assert action.actor == "ada" and action.step_id == late.pk
    assert action.data["evidence"] == {"id": landed.id}
    assert isinstance(action.data["decision"], int)  # recorded, then applied by a worker
    recorded = Entry.objects.get(step=correction, kind=EntryKind.STEP_RECORDED)
    assert recorded.data["correction_of"] == late.n and recorded.actor == "ada"
    assert action.data["reason"] == "the provider shows the charge"
    # Not a second time.
    with pytest.raises(TransitionRefused, match="corrected already"):
        step_correct(
            step_id=late.pk, actor="ada", evidence={"id": landed.id}, reason="x", tools=tools
        )

    # Compensating the task (not a saga) undoes it as any saga's compensation: keyed from it.
    saga_compensate(task_id=task.pk, actor="ada", reason="the customer had cancelled")
    result = task_advance(
        task_id=task.pk, planner=ScriptedPlanner([]), tools=tools, rules=SagaRules(saga=False)
    )
    assert result.stopped == "compensated"
    refund = Step.objects.get(task=task, offsets=correction)
    assert refund.state == "done" and refund.key == undo_key(correction.key)
    assert refund.args["undoes"] == landed.id
    assert Step.objects.get(pk=correction.pk).offset_by_id == refund.pk
    refunds = [e for e in provider.ledger if e.key == refund.key]
    assert len(refunds) == 1
    assert Task.objects.get(pk=task.pk).status == "compensated"


def test_a_late_charge_of_a_cancelled_task_is_recorded_and_the_task_stays_over() -> None:
    """Finished means finished: the correction records the effect (so the guards know the
    invoice was paid), and the task, which ended cancelled, never runs again, to undo it or
    for anything else; resumed, it is cancelled again."""
    provider = Provider()
    tools = tools_of(provider)
    inv = invoice()
    late = late_charge(provider, tools, inv)
    landed = provider.find(late.key)
    assert landed is not None
    correction = correct(
        step_id=late.pk, actor="ada", evidence={"id": landed.id}, reason="it landed", tools=tools
    )
    task = Task.objects.get(pk=late.task_id)
    assert "runs no more" in task.attention and task.ended_as == "cancelled"
    with pytest.raises(TransitionRefused, match="never runs again"):
        saga_compensate(task_id=task.pk, actor="ada", reason="refund it")
    assert task_resume(task_id=task.pk, actor="ada", reason="refunded by hand") == "cancelled"
    # The invoice stands paid: another task's charge of it is refused, with the evidence.
    other = task_create(kind="renewal", goal="renew", refs={"invoice": inv})
    lease = lease_acquire(task_id=other.pk, owner="runner")
    assert lease is not None
    again = step_record(lease=lease, decision=charge(inv), tools=tools)
    assert again.state == "not_done" and again.refusal == "already_done"
    assert correction.key in again.detail
    assert [e.key for e in provider.ledger if e.key.startswith(f"ao:{other.pk}")] == []


def test_a_correction_without_the_evidence_the_tool_declares_is_refused_and_writes_nothing() -> (
    None
):
    provider = Provider()
    tools = tools_of(provider)
    late = late_charge(provider, tools)
    before = (Step.objects.filter(task_id=late.task_id).count(), Entry.objects.count())
    with pytest.raises(TransitionRefused, match="give the evidence .*: id"):
        step_correct(
            step_id=late.pk, actor="ada", evidence={"charge": "x"}, reason="seen", tools=tools
        )
    with pytest.raises(TransitionRefused, match="say why"):
        step_correct(step_id=late.pk, actor="ada", evidence={"id": "e"}, reason=" ", tools=tools)
    assert (Step.objects.filter(task_id=late.task_id).count(), Entry.objects.count()) == before
    assert Task.objects.get(pk=late.task_id).status == "needs_human"


def test_a_correction_the_guards_refuse_writes_nothing() -> None:
    provider = Provider()
    tools = tools_of(provider)
    inv = invoice()
    late = late_charge(provider, tools, inv)
    # Meanwhile another task charged the same invoice: its once-only effect stands.
    other = task_create(kind="renewal", goal="renew again", refs={"invoice": inv})
    lease = lease_acquire(task_id=other.pk, owner="runner")
    assert lease is not None
    paid = step_record(lease=lease, decision=charge(inv), tools=tools)
    step_settle(step_id=paid.pk, outcome=Outcome.done({"id": "eff_x"}), via="t", lease=lease)
    lease_release(lease)
    before = (Step.objects.filter(task_id=late.task_id).count(), Entry.objects.count())
    with pytest.raises(TransitionRefused, match="cannot be recorded: another charge"):
        step_correct(step_id=late.pk, actor="ada", evidence={"id": "e"}, reason="x", tools=tools)
    assert (Step.objects.filter(task_id=late.task_id).count(), Entry.objects.count()) == before
    task = Task.objects.get(pk=late.task_id)
    assert task.status == "needs_human" and task.lease_expires_at is None


def test_only_a_step_settled_not_done_after_it_was_sent_is_corrected() -> None:
    provider = Provider()
    tools = tools_of(provider)
    late = late_charge(provider, tools, cancel=False)
    assert correction_refusal(step_id=late.pk) is None
    # Another task's step done, and a refused one: neither can be corrected.
    task = task_create(kind="renewal", goal="renew", refs={"invoice": invoice()})
    lease = lease_acquire(task_id=task.pk, owner="runner")
    assert lease is not None
    done = step_record(lease=lease, decision=charge(task.refs["invoice"]), tools=tools)
    step_settle(step_id=done.pk, outcome=Outcome.done({"id": "e"}), via="attempt", lease=lease)
    refused = step_record(lease=lease, decision=charge(task.refs["invoice"]), tools=tools)
    assert refused.refusal == "already_done"
    lease_release(lease)
    flag(task.pk)
    assert "only a step settled not done" in str(correction_refusal(step_id=done.pk))
    assert "never sent" in str(correction_refusal(step_id=refused.pk))
    task_resume(task_id=late.task_id, actor="ops", reason="go on")
    assert "only a task that needs a person" in str(correction_refusal(step_id=late.pk))


def test_cancel_and_compensate_say_why_not_with_the_services_own_sentence() -> None:
    provider = Provider()
    tools = tools_of(provider)
    task = task_create(kind="renewal", goal="renew", refs={"invoice": invoice()})
    lease = lease_acquire(task_id=task.pk, owner="runner")
    assert lease is not None
    step = step_record(lease=lease, decision=charge(invoice()), tools=tools)
    lease_release(lease)
    flag(task.pk, reason="looked at by a person")
    why = cancel_refusal(task_id=task.pk)
    assert why is not None and "it may have happened" in why
    with pytest.raises(TransitionRefused) as refused:
        task_cancel(task_id=task.pk, actor="ops", reason="stop")
    assert str(refused.value) == why
    # Not a saga, nothing done to undo: compensating is refused, with the same sentence.
    why = compensate_refusal(task_id=task.pk)
    assert why is not None and "no done effect that can be undone" in why
    with pytest.raises(TransitionRefused) as refused:
        saga_compensate(task_id=task.pk, actor="ops", reason="undo")
    assert str(refused.value) == why
    # Once the charge is settled done, there is something to undo, and nothing stays open.
    resolve(step_id=step.pk, actor="ops", done=True, evidence="eff_1", reason="seen")
    assert compensate_refusal(task_id=task.pk) is None
    assert cancel_refusal(task_id=task.pk) is None  # not a saga: a person may stop it
    task_resume(task_id=task.pk, actor="ops", reason="go on")
    assert "only while it needs a person" in str(compensate_refusal(task_id=task.pk))
    flag(task.pk)
    task_cancel(task_id=task.pk, actor="ops", reason="stop")
    assert "over" in str(compensate_refusal(task_id=task.pk))
    assert "only a task that needs a human" in str(cancel_refusal(task_id=task.pk))
