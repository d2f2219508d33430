"""The tools' contracts that need no provider: schemas, guards, keys, classes."""

from __future__ import annotations

import pytest
from django.test import override_settings

from agentops.kinds import tool_registry
from commerce.tools.email import message_id
from journal.protocols import CostClass

VALID = {"invoice": "INV-2291", "amount": 4900, "currency": "usd", "payment_method": "pm_card_visa"}


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"amount": "49.00"}, "amount: '49.00' is not of type 'integer'"),
        ({"amount": 49.0}, "amount: 49.0 is not of type 'integer'"),
        ({"amount": True}, "amount: True is not of type 'integer'"),
        ({"amount": 0}, "amount: 0 is less than the minimum of 1"),
        ({"currency": "USD"}, "currency: 'USD' does not match"),
        ({"invoice": None}, "invoice: None is not of type 'string'"),
        ({"idempotency_key": "mine"}, "Additional properties are not allowed"),
    ],
)
def test_charge_arguments_are_checked_against_the_schema(
    change: dict[str, object], complaint: str
) -> None:
    problems = tool_registry()["charge_customer"].validate({**VALID, **change})
    assert any(complaint in p for p in problems), problems


def test_valid_charge_arguments_pass_and_guard_the_invoice() -> None:
    charge = tool_registry()["charge_customer"]
    assert charge.validate(VALID) == []
    assert charge.guard(VALID) == "charge:INV-2291"
    assert charge.compensation == "refund_charge"
    assert charge.cost == CostClass.FULL


def test_every_tool_declares_what_the_journal_needs() -> None:
    tools = tool_registry()
    # The shipped kinds' (other installed apps bring theirs: examples/support)
    assert set(tools) >= {
        "charge_customer",
        "refund_charge",
        "send_email",
        "hold_flight",
        "release_flight",
        "book_hotel",
        "cancel_hotel",
    }
    for name, tool in tools.items():
        assert tool.name == name
        assert tool.key_lifetime.total_seconds() > 0
        assert tool.validate({}) != [], f"{name} accepts empty arguments"
        if tool.compensation is not None:
            assert tool.compensation in tools
    assert tools["send_email"].compensation is None  # irreversible


def test_timeouts_default_to_five_seconds_and_can_be_set_per_tool() -> None:
    tools = tool_registry()
    assert tools["charge_customer"].timeout == 5.0
    with override_settings(TOOL_TIMEOUTS={"charge_customer": 8.0}):
        assert tools["charge_customer"].timeout == 8.0
        assert tools["send_email"].timeout == 5.0


def test_the_email_carries_the_step_key_in_its_message_id() -> None:
    assert message_id("ao:t:3") == "<ao:t:3@agentops>"
