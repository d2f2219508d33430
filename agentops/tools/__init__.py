"""The tools agents may call, by name (each implements journal.protocols.Tool)."""

from __future__ import annotations

from agentops.tools.bookings import BookHotel, CancelHotel, HoldFlight, ReleaseFlight
from agentops.tools.email import SendEmail
from agentops.tools.payments import ChargeCustomer, RefundCharge
from journal.protocols import Tool


def tool_registry() -> dict[str, Tool]:
    """Fresh instances, so settings changed since (e.g. in tests) are taken into account."""
    tools: list[Tool] = [
        ChargeCustomer(),
        RefundCharge(),
        SendEmail(),
        HoldFlight(),
        ReleaseFlight(),
        BookHotel(),
        CancelHotel(),
    ]
    return {tool.name: tool for tool in tools}
