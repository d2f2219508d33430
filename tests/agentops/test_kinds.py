"""Task kinds: limits per currency, and settings refused at start (agentops/kinds.py, checks)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from agentops.checks import lease_outlasts_tool_calls, sweeper_finds_dead_runs_by_the_lease
from agentops.effects import money_committed
from agentops.kinds import KindRules, kind_get, tool_registry
from agentops.money import money_text
from journal.outcomes import StepState
from journal.protocols import Bound, Refused, StepFact, TaskFacts


def facts(*charges: tuple[int, str, StepState, bool]) -> TaskFacts:
    return TaskFacts(
        task_id="t",
        kind="trip",
        goal="g",
        refs={},
        steps=[
            StepFact(
                n=i + 1,
                tool="charge_customer",
                args={"invoice": f"I-{i}", "amount": amount, "currency": currency},
                state=state,
                detail="",
                key=f"k{i}",
                offset=undone,
            )
            for i, (amount, currency, state, undone) in enumerate(charges)
        ],
    )


def check(rules: KindRules, amount: int, currency: str, history: TaskFacts) -> Any:
    """The cap's verdict on moving ``amount`` with a tool that declares its money."""
    charge = tool_registry()["charge_customer"]
    over = rules._over_cap(charge, {"amount": amount, "currency": currency}, history)
    return over if over is not None else Bound()


def test_the_money_cap_is_per_currency_and_counts_what_may_have_been_charged() -> None:
    refs = {"invoice": "T-1"}
    rules = KindRules(kind_get("trip"), refs, tool_registry())
    cap = kind_get("trip").money_caps["usd"]
    history = facts(
        (cap - 100, "usd", StepState.DONE, False),
        (cap, "eur", StepState.UNKNOWN, False),  # may have happened: it counts, in euros
        (cap, "usd", StepState.NOT_DONE, False),  # certainly did not: it does not count
        (cap, "gbp", StepState.DONE, True),  # refunded: it does not count
    )
    assert isinstance(check(rules, 100, "usd", history), Bound)
    over = check(rules, 101, "usd", history)
    assert isinstance(over, Refused) and over.code == "limit"
    assert (
        f"amount 101 (1.01 USD) exceeds what this task may still move: 1.00 USD of its limit "
        f"of {money_text(cap, 'usd')}" in over.reason
    )
    assert isinstance(check(rules, 1, "eur", history), Refused)
    assert isinstance(check(rules, cap, "gbp", history), Bound)
    unknown = check(rules, 1, "jpy", history)
    assert isinstance(unknown, Refused) and "may not move money in jpy" in unknown.reason


def test_a_lease_shorter_than_a_tool_call_is_refused_at_start() -> None:
    with override_settings(JOURNAL_LEASE_SECONDS=60, TOOL_TIMEOUT_SECONDS=5):
        assert lease_outlasts_tool_calls() == []
    with override_settings(
        JOURNAL_LEASE_SECONDS=60, TOOL_TIMEOUT_SECONDS=5, TOOL_TIMEOUTS={"charge_customer": 61}
    ):
        [error] = lease_outlasts_tool_calls()
        assert error.id == "agentops.E001" and "charge_customer" in error.msg
        with pytest.raises(SystemCheckError, match="agentops.E001"):
            call_command("check")
    with override_settings(
        JOURNAL_LEASE_SECONDS=10, TOOL_TIMEOUT_SECONDS=4, STRIPE_MAX_NETWORK_RETRIES=2
    ):
        # The stripe library's own retries make one call up to three requests long.
        assert {e.msg.split(" of ")[1].split(" ")[0] for e in lease_outlasts_tool_calls()} == {
            "charge_customer",
            "refund_charge",
        }


def test_a_sweep_grace_past_the_lease_is_warned_of() -> None:
    with override_settings(JOURNAL_LEASE_SECONDS=60, SWEEP_GRACE_SECONDS=30):
        assert sweeper_finds_dead_runs_by_the_lease() == []
    with override_settings(JOURNAL_LEASE_SECONDS=60, SWEEP_GRACE_SECONDS=60):
        [warning] = sweeper_finds_dead_runs_by_the_lease()
        assert warning.id == "agentops.W001" and "after the grace" in warning.msg


def test_amounts_are_shown_in_units_people_read() -> None:
    assert money_text(420000, "usd") == "4,200.00 USD"
    assert money_text(5, "eur") == "0.05 EUR"
    assert money_text(5000, "jpy") == "5,000 JPY"  # no minor unit


class Counted(StepFact):
    """A step that counts how often its tool is read: how many steps a question looked at."""

    reads = 0

    def __getattribute__(self, name: str) -> Any:
        if name == "tool":
            type(self).reads += 1
        return super().__getattribute__(name)


def test_the_money_committed_is_read_from_each_step_once_as_the_task_grows() -> None:
    """The cap is checked before every call that moves money: the sum over the task's steps
    is carried from step to step, so a task's thousandth step costs what its first did."""
    charge = tool_registry()["charge_customer"]
    tools = {"charge_customer": charge}
    history = TaskFacts(task_id="t", kind="trip", goal="g", refs={}, steps=[])
    Counted.reads = 0
    expected = 0
    for i in range(400):
        state = (StepState.DONE, StepState.NOT_DONE, StepState.UNKNOWN, StepState.PENDING)[i % 4]
        fact = Counted(
            n=i + 1,
            tool="charge_customer",
            args={"invoice": f"I-{i}", "amount": i, "currency": ("usd", "eur")[i % 5 == 0]},
            state=state,
            detail="",
            key=f"k{i}",
        )
        history = history.appended(fact)
        if state != StepState.NOT_DONE and i % 5 != 0:
            expected += i
        assert money_committed(history, "usd", tools) == expected
    assert Counted.reads == 400  # asked at every step, each step read once (not 80,200 times)
    again = TaskFacts(task_id="t", kind="trip", goal="g", refs={}, steps=list(history.steps))
    assert money_committed(again, "usd", tools) == expected


def test_a_charge_is_bound_to_the_customer_the_task_names_exactly() -> None:
    """The renewal's customer (``cus_…``, from the invoice) is the charge's, character for
    character; a task that names none takes a charge that names none."""
    args = {"invoice": "INV-1", "amount": 4900, "currency": "usd", "payment_method": "pm_card_visa"}
    refs = {"invoice": "INV-1", "amount": 4900, "email": "a@example.com"}
    named = KindRules(kind_get("renewal"), {**refs, "customer": "cus_AbC1"}, tool_registry())
    history = TaskFacts(task_id="t", kind="renewal", goal="g", refs={}, steps=[])

    def verdict(rules: KindRules, **change: Any) -> Refused | Bound:
        return rules.check(tool="charge_customer", args={**args, **change}, facts=history)

    assert isinstance(verdict(named, customer="cus_AbC1"), Bound)
    for other in (None, "cus_abc1", "cus_Other"):
        change = {} if other is None else {"customer": other}
        refused = verdict(named, **change)
        assert isinstance(refused, Refused) and "customer" in refused.reason, other
    unnamed = KindRules(kind_get("renewal"), refs, tool_registry())
    assert isinstance(verdict(unnamed), Bound)
    assert isinstance(verdict(unnamed, customer="cus_AbC1"), Refused)
