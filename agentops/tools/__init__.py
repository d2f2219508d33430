"""The tools agents may call, by name (each implements journal.protocols.Tool)."""

from __future__ import annotations

from agentops.tools.base import SchemaTool
from agentops.tools.bookings import BookHotel, CancelHotel, HoldFlight, ReleaseFlight
from agentops.tools.email import SendEmail
from agentops.tools.payments import ChargeCustomer, RefundCharge


def tool_registry() -> dict[str, SchemaTool]:
    """Fresh instances, so settings changed since (e.g. in tests) are taken into account."""
    tools: list[SchemaTool] = [
        ChargeCustomer(),
        RefundCharge(),
        SendEmail(),
        HoldFlight(),
        ReleaseFlight(),
        BookHotel(),
        CancelHotel(),
    ]
    return {tool.name: tool for tool in tools}
