"""Figures from repeated measurements: medians, ranges, and how sure a median is.

A rate's confidence interval is a percentile bootstrap of its median over the repetitions;
a ratio's is the same over the *paired* ratios (repetition i of one path over repetition i
of the other, measured next to each other in the same run), so a machine that slows down
for a minute moves both sides of a pair together instead of widening the interval. The
bootstrap is seeded: the same measurements give the same interval.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from typing import Any

BOOTSTRAP_SAMPLES = 4000
CONFIDENCE = 0.95


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def median_interval(
    values: Sequence[float], *, seed: int = 0, confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """A ``confidence`` interval of the median of ``values`` (percentile bootstrap)."""
    if len(values) < 2:
        return (values[0], values[0]) if values else (float("nan"), float("nan"))
    rng = random.Random(seed)  # noqa: S311 - a seeded bootstrap, not a secret
    n = len(values)
    medians = sorted(
        statistics.median(values[rng.randrange(n)] for _ in range(n))
        for _ in range(BOOTSTRAP_SAMPLES)
    )
    tail = (1 - confidence) / 2 * 100
    return percentile(medians, tail), percentile(medians, 100 - tail)


def summary(values: Sequence[float], digits: int = 1, *, seed: int = 0) -> dict[str, Any]:
    """Median, its 95% interval, min, max and every value of repeated measurements."""
    low, high = median_interval(values, seed=seed)
    return {
        "median": round(statistics.median(values), digits),
        "ci95": [round(low, digits), round(high, digits)],
        "min": round(min(values), digits),
        "max": round(max(values), digits),
        "runs": len(values),
        "values": [round(v, digits) for v in values],
    }


def ratio_summary(
    numerators: Sequence[float], denominators: Sequence[float], *, seed: int = 0
) -> dict[str, Any]:
    """The paired ratios ``numerators[i] / denominators[i]``: their median and its interval."""
    if len(numerators) != len(denominators):
        raise ValueError("a ratio pairs the repetitions of one run: as many of each")
    ratios = [a / b for a, b in zip(numerators, denominators, strict=True)]
    figures = summary(ratios, digits=3, seed=seed)
    return {key: figures[key] for key in ("median", "ci95", "min", "max", "values")}
