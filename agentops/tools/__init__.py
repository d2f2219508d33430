"""The tools agents may call, by name (each implements journal.protocols.Tool)."""

from __future__ import annotations

from django.conf import settings
from django.utils.module_loading import import_string

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


def tools_wrapped(tools: dict[str, SchemaTool]) -> dict[str, SchemaTool]:
    """`tools` through each wrapper ``TOOL_WRAPPERS`` names, in order: a dotted path to a
    callable that takes the tools by name and returns them, some wrapped. None in
    production; the chaos run arms a worker with one that kills it at a call."""
    for path in settings.TOOL_WRAPPERS:
        tools = import_string(path)(tools)
    return tools
