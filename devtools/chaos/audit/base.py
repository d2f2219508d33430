"""What every audit of the chaos run shares: the process faults that hit a task
(:class:`Hit`), the recovery samples (:class:`Samples`) and their summary by fault kind, the
faults a provider logs with the request's key, and how many examples a figure keeps.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

# Faults logged with the key of the request they hit (the others: down, webhooks, lags).
KEYED_FAULTS = frozenset(
    {
        "latency_before_effect",
        "latency_after_effect",
        "drop_after_effect",
        "error_500_before",
        "error_500_after",
        "conflict",
        "rate_limit",
        "reset_before_read",
    }
)
EXAMPLES = 10


@dataclass(frozen=True)
class Hit:
    """A process fault that hit a task at ``at``; the task could move again from ``due``."""

    kind: str
    at: float
    task: str
    due: float


class Samples(list[dict[str, Any]]):
    """Recovery samples: which fault, which task, when it hit, how long until it moved."""

    def add(self, kind: str, task: str, at: float, took: float | None) -> None:
        self.append({"kind": kind, "task": task, "at": round(at, 3), "took": took})


def summary_of(samples: Samples) -> dict[str, dict[str, Any]]:
    grouped: dict[str, list[float | None]] = defaultdict(list)
    for sample in samples:
        grouped[sample["kind"]].append(sample["took"])
    out: dict[str, dict[str, Any]] = {}
    for kind, values in sorted(grouped.items()):
        seen = [v for v in values if v is not None]
        out[kind] = {
            "n": len(values),
            "p50": round(statistics.median(seen), 2) if seen else None,
            "max": round(max(seen), 2) if seen else None,
            "never": len(values) - len(seen),
        }
    return out
