from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def summary(values: Sequence[float], digits: int = 1) -> dict[str, Any]:
    """median, min and max of repeated measurements."""
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
        "runs": len(values),
    }


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]
