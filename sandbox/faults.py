"""Injected faults: the kinds a test may ask for (``FAULTS``), the lying replies
(``LIES``), and the set of faults armed on one provider (``FaultSet``), with their seeded
dice and use counts.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field

from sandbox.wire import JSON, invalid

FAULTS = frozenset(
    {
        "latency_before_effect",
        "latency_after_effect",
        "drop_after_effect",
        "error_500_before",
        "error_500_after",
        "rate_limit",
        "conflict",
        "misdirected",
        "reset_before_read",
        "down",
        # The effect happens; the 200 that says so does not carry it (LIES).
        "empty_after_effect",
        "wrong_shape_after_effect",
        "html_after_effect",
    }
)

# A provider (or a proxy in front of it) that lies: the effect happens, and the reply is a
# 200 that does not carry it. Each is (body, content type).
LIES: dict[str, tuple[bytes, str]] = {
    "empty_after_effect": (b"", "application/json"),
    "wrong_shape_after_effect": (b'{"ok": true, "data": [1, 2, 3]}', "application/json"),
    "html_after_effect": (
        b"<!doctype html><html><head><title>OK</title></head><body><h1>OK</h1></body></html>",
        "text/html; charset=utf-8",
    ),
}


@dataclass
class Fault:
    operation: str
    fault: str
    delay: float = 0.0
    times: int | None = 1
    probability: float = 1.0
    seed: int | None = None
    rng: random.Random = field(default_factory=random.Random, repr=False)

    def as_json(self) -> JSON:
        return {
            "operation": self.operation,
            "fault": self.fault,
            "delay": self.delay,
            "times": self.times,
            "probability": self.probability,
            "seed": self.seed,
        }


class FaultSet:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def add(self, spec: JSON) -> Fault:
        operation = spec.get("operation", "*")
        kind = spec.get("fault")
        if not isinstance(operation, str) or not operation:
            raise invalid("operation must be a non-empty string", "operation")
        if kind not in FAULTS:
            raise invalid(f"fault must be one of {sorted(FAULTS)}", "fault")
        try:
            delay = float(spec.get("delay", 0.0))
            times_raw = spec.get("times", 1)
            times = None if times_raw is None else int(times_raw)
            probability = float(spec.get("probability", 1.0))
            seed_raw = spec.get("seed")
            seed = None if seed_raw is None else int(seed_raw)
        except (TypeError, ValueError) as exc:
            raise invalid(f"bad fault option: {exc}") from exc
        fault = Fault(
            operation=operation,
            fault=str(kind),
            delay=delay,
            times=times,
            probability=probability,
            seed=seed,
            rng=random.Random(seed),  # noqa: S311 - reproducible fault injection, not crypto
        )
        if kind != "down":
            with self._lock:
                self._faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def list(self) -> list[JSON]:
        with self._lock:
            return [f.as_json() for f in self._faults]

    def take(self, operation: str) -> Fault | None:
        """The fault to apply to one request for ``operation``, if any (consumes a use)."""
        with self._lock:
            for fault in self._faults:
                if fault.operation not in ("*", operation) or fault.fault == "reset_before_read":
                    continue
                if self._fires(fault):
                    return fault
        return None

    def take_reset(self, operation: str) -> bool:
        """Consume a ``reset_before_read`` fault for ``operation``, if one fires now.

        Checked as soon as the request line and headers are parsed, before the body is read.
        """
        with self._lock:
            for fault in self._faults:
                if fault.operation in ("*", operation) and fault.fault == "reset_before_read":
                    return self._fires(fault)
        return False

    def _fires(self, fault: Fault) -> bool:
        """Roll the fault's seeded dice and count one use (caller holds the lock)."""
        if fault.probability < 1.0 and fault.rng.random() >= fault.probability:
            return False
        if fault.times is not None:
            fault.times -= 1
            if fault.times <= 0:
                self._faults.remove(fault)
        return True
