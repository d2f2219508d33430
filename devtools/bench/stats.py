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
from collections.abc import Mapping, Sequence
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


def first_last(values: Sequence[float | None], count: int = 5) -> dict[str, Any] | None:
    """The mean of the first ``count`` values and of the last, and how much the second is
    above the first (a soak's waves: 0.05 is 5 % more); None if any of them is missing."""
    first, last = values[:count], values[-count:]
    if not first or any(v is None for v in (*first, *last)):
        return None
    start = statistics.fmean(v for v in first if v is not None)
    end = statistics.fmean(v for v in last if v is not None)
    return {
        "first": round(start, 3),
        "last": round(end, 3),
        "growth": round(end / start - 1, 3) if start else None,
    }


# The issue's target for a soak: its last five waves' throughput at least this much of its
# first five's.
SOAK_THROUGHPUT_TARGET = 0.95

# The soak's processes whose work per task does not grow with the journal: a renewal asks each
# sandbox for the same thing whatever the journal holds, so their CPU per task moves with the
# host and with their own ledgers (which fill up to what they retain, then hold), not with the
# journal. (Not the bench: it watches a wave until it ends, so a slower wave costs it more per
# task whatever the reason.)
HOST_BOUND_ROLES = ("payments", "mail")


def _over_host_bound(wave: Mapping[str, Any], role: str) -> float | None:
    """A role's CPU a task in one wave, in units of the host-bound roles' in the same wave."""
    cpu = wave["cpu_ms_per_task"]
    bound = [cpu.get(r) for r in HOST_BOUND_ROLES]
    if cpu.get(role) is None or any(b is None for b in bound):
        return None
    unit = statistics.fmean(b for b in bound if b is not None)
    return float(cpu[role]) / unit if unit else None


def soak_drift(waves: Sequence[Mapping[str, Any]], count: int = 5) -> dict[str, Any]:
    """How the cost of a task moved from a soak's first ``count`` waves to its last: the CPU
    each process spent per task, the hypervisor's steal and the WAL a task wrote (where the
    waves have them), and the mean growth of the roles whose work does not grow with the
    journal (:data:`HOST_BOUND_ROLES`): what the host moved, and what their own work a task
    moved as they filled up to what they retain. ``over_host_bound``: each
    other role's CPU a task divided, wave by wave, by the host-bound roles' mean in that
    wave, first waves against last: its growth with what moved theirs taken out."""
    roles = list(waves[0]["cpu_ms_per_task"]) if waves else []
    cpu = {
        role: first_last([w["cpu_ms_per_task"].get(role) for w in waves], count) for role in roles
    }
    growths = [(cpu.get(role) or {}).get("growth") for role in HOST_BOUND_ROLES]
    bound = [g for g in growths if g is not None]
    return {
        "cpu_ms_per_task": cpu,
        "over_host_bound": {
            role: first_last([_over_host_bound(w, role) for w in waves], count)
            for role in roles
            if role not in HOST_BOUND_ROLES
        },
        "host_bound_cpu_growth": round(statistics.fmean(bound), 3) if bound else None,
        "host_steal_share": first_last([w.get("host_steal_share") for w in waves], count),
        "wal_kb_per_task": first_last(
            [(w.get("server") or {}).get("wal_kb_per_task") for w in waves], count
        ),
    }
