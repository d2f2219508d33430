"""What the chaos run's tests share (tests/agentops/test_chaos_*.py)."""

from __future__ import annotations

from typing import Any


def ledger_row(operation: str, at: float, key: str, object_id: str, **extra: Any) -> dict[str, Any]:
    """A row of a provider's ledger, as its admin API lists it."""
    return {"operation": operation, "at": at, "key": key, "object_id": object_id, **extra}
