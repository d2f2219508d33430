"""The task list's rows (issue 38): each task's amount, customer and end, sortable by them."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from journal.models import Task
from journal.record import task_create
from tests.agentops.test_operators import client_for, redis, user  # noqa: F401
from tests.journal.support import invoice

pytestmark = pytest.mark.usefixtures("committed")


def _order(html: str, *tasks: Task) -> list[Task]:
    return sorted(tasks, key=lambda t: html.index(f"/tasks/{t.pk}"))


def test_the_list_shows_amount_and_customer_and_sorts_by_them(redis: Any) -> None:  # noqa: F811
    c = client_for(user("Operators (read-only)"))
    tag = uuid.uuid4().hex[:8]
    small = task_create(
        kind="renewal",
        goal="renew",
        refs={"invoice": invoice(), "amount": 4900, "email": f"zed-{tag}@example.com"},
    )
    large = task_create(
        kind="renewal",
        goal="renew",
        refs={
            "invoice": invoice(),
            "amount": 12099,
            "currency": "eur",
            "email": f"amy-{tag}@example.com",
        },
    )
    # Refs no door checked (an amount as text): sorted last, never an error.
    odd = task_create(
        kind="renewal",
        goal="renew",
        refs={"invoice": invoice(), "amount": "49.00", "email": f"mid-{tag}@example.com"},
    )
    html = c.get("/", {"q": tag}).content.decode()
    assert "49.00 USD" in html and "120.99 EUR" in html  # the kind's currency by default
    assert f"zed-{tag}@example.com" in html and f"amy-{tag}@example.com" in html
    by_amount = c.get("/", {"q": tag, "sort": "amount"}).content.decode()
    assert _order(by_amount, small, large, odd) == [large, small, odd]
    by_customer = c.get("/", {"q": tag, "sort": "customer"}).content.decode()
    assert _order(by_customer, small, large, odd) == [large, odd, small]
    assert 'aria-sort="ascending"' in by_customer
    for sort in ("ended", "duration", "oldest", "stuck", "nope", "amount; drop table", "\x00"):
        assert c.get("/", {"q": tag, "sort": sort}).status_code == 200, sort
    refused = c.get("/", {"q": tag, "sort": "largest"}).content.decode()
    assert "No such order, “largest”: the tasks are shown newest first." in refused
    assert "No such order" not in by_amount
    # The headers sort, keeping the search.
    assert f'href="?q={tag}&amp;sort=amount"' in html
    # Not ended yet: said so, with how long so far.
    assert "not ended" in html


def test_a_held_steps_deadlines_put_a_hold_lapsing_first_and_warn() -> None:
    from datetime import timedelta

    from django.utils import timezone

    from agentops.operators.deadlines import deadlines_of
    from journal.models import Approval, Step

    now = timezone.now()
    lapses = int((now + timedelta(minutes=15)).timestamp())
    hold = Step(
        n=1,
        kind="call",
        tool="hold_flight",
        state="done",
        outcome={"evidence": {"id": "fh_1", "expires_at": lapses, "status": "held"}},
    )
    released = Step(
        n=2,
        kind="call",
        tool="hold_flight",
        state="done",
        offset_by_id=9,
        outcome={"evidence": {"id": "fh_2", "expires_at": lapses - 60}},
    )
    approval = Approval(expires_at=now + timedelta(days=2))
    found = deadlines_of(approval, [hold, released], now)
    assert found.first is not None and found.first.n == 1
    assert found.first.what == "step 1 (hold_flight) lapses at the provider"
    assert found.first.field == "expires_at"
    assert int(found.first.at.timestamp()) == lapses
    assert [d.n for d in found.items] == [1, None]  # the undone hold is not a deadline
    assert found.warning and not found.lapsed
    # Nothing held: nothing to decide by.
    assert deadlines_of(None, [hold], now).first is None
    # No effect that lapses: the approval's expiry alone, no warning.
    alone = deadlines_of(approval, [], now)
    assert alone.first is not None and alone.first.n is None and not alone.warning
    # Lapsed already: said so.
    late = deadlines_of(approval, [hold], now + timedelta(hours=1))
    assert [d.n for d in late.lapsed] == [1] and late.warning


def test_a_done_step_says_when_it_was_undone_by_its_undo_or_at_the_provider() -> None:
    from django.utils import timezone

    from agentops.audit.models import AuditRun, Finding
    from agentops.operators.selectors import task_page
    from journal.leases import lease_acquire, lease_release
    from journal.perform import step_perform
    from journal.protocols import Call
    from journal.record import step_record
    from journal.selectors import task_facts_by_id
    from tests.journal.support import ChargeTool, Provider

    provider = Provider()
    charge = ChargeTool(provider, name="charge_customer", compensation="refund_charge")
    refund = ChargeTool(provider, name="refund_charge")
    tools: dict[str, Any] = {"charge_customer": charge, "refund_charge": refund}
    task = task_create(
        kind="trip",
        goal="two charges",
        refs={"invoice": invoice(), "amount": 420000, "email": "alan@example.com"},
        plan=[{"tool": "charge_customer"}],
    )
    lease = lease_acquire(task_id=task.pk, owner="runner")
    assert lease is not None

    def call() -> Call:
        return Call("charge_customer", {"invoice": invoice(), "amount": 420000, "currency": "usd"})

    first = step_record(lease=lease, decision=call(), tools=tools)
    step_perform(lease=lease, step=first, tool=charge)
    second = step_record(lease=lease, decision=call(), tools=tools)
    step_perform(lease=lease, step=second, tool=charge)
    target = task_facts_by_id(task_id=task.pk).steps[0]
    undo = step_record(
        lease=lease,
        decision=Call("refund_charge", charge.undo_args(target.args, target.evidence)),
        tools=tools,
        undo_of=target,
    )
    step_perform(lease=lease, step=undo, tool=refund)
    lease_release(lease)
    now = timezone.now()
    run = AuditRun.objects.create(provider="stripe", trigger="command", since=now, until=now)
    Finding.objects.create(
        provider="stripe",
        kind="offset_unknown",
        key=second.key,
        task=task,
        step=second,
        run=run,
        summary="refunded 420000 usd at the provider",
    )
    shown = task_page(task_id=task.pk)
    rows = {r.step.n: r for r in shown.rows}
    # One history, oldest first, in plain words: the steps, the audit's finding.
    story = [h.what for h in shown.story]
    assert story[0].startswith("The task was started")
    assert any(w.startswith("Step 1 (charge_customer): recorded with its key") for w in story)
    assert story[-1] == ("The provider audit found: refunded 4,200.00 USD at the provider"), story[
        -1
    ]
    assert [h.at for h in shown.story] == sorted(h.at for h in shown.story)
    assert rows[1].badge_text == "done · undone" and rows[1].undo_tool == "refund_charge"
    assert rows[2].badge_text == "done · undone at the provider"
    assert rows[3].badge_text == "done"  # the undo itself
    c = client_for(user("Operators (read-only)"))
    html = c.get(f"/tasks/{task.pk}").content.decode()
    assert "done · undone</span>" in html and "done · undone at the provider</span>" in html
    assert "Everything that happened, in order" in html and "data-zone-toggle" in html
