"""How fast the host is, now: what a soak's waves are compared against.

This machine is a virtual one that shares its cores: the same work takes a third longer in
one minute than in the next, and a soak's last waves run minutes after its first. So each
wave also times a fixed piece of work that does not grow with the journal (:func:`probe_ms`:
JSON, a hash and loopback round trips, as a step's own work is), and reads how much of the
wave's CPU time the hypervisor took for others (:class:`Steal`, Linux's ``/proc/stat``).
Neither corrects a figure: they say how much of a change the host made.
"""

from __future__ import annotations

import hashlib
import json
import socket
import statistics
import threading
import time
from pathlib import Path

_DOCUMENT = {
    "task": "0190c5a8-0000-7000-8000-000000000000",
    "args": {"invoice": "INV-2024-0001", "amount": 4900, "currency": "usd"},
    "evidence": [{"id": f"pi_{i:024d}", "status": "succeeded"} for i in range(8)],
}


def _work(rounds: int, conn: socket.socket) -> None:
    for _ in range(rounds):
        text = json.dumps(_DOCUMENT, sort_keys=True)
        hashlib.sha256(json.loads(text)["task"].encode() + text.encode()).digest()
        conn.sendall(b".")
        conn.recv(16)


def _echo(listener: socket.socket) -> None:
    conn, _ = listener.accept()
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while chunk := conn.recv(16):
            conn.sendall(chunk)


def probe_ms(*, rounds: int = 400, times: int = 5) -> float:
    """Milliseconds the fixed work takes, the median of ``times``: ``rounds`` of a JSON
    document written, read and hashed and a loopback round trip."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        echo = threading.Thread(target=_echo, args=(listener,), daemon=True)
        echo.start()
        with socket.create_connection(listener.getsockname()[:2]) as conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _work(20, conn)  # warm
            took = []
            for _ in range(times):
                began = time.perf_counter()
                _work(rounds, conn)
                took.append(time.perf_counter() - began)
        echo.join(timeout=5)
    return round(statistics.median(took) * 1000, 2)


_STAT = Path("/proc/stat")


class Steal:
    """The share of this machine's CPU time the hypervisor gave to others since it was made
    (None where the kernel does not say: not Linux)."""

    def __init__(self) -> None:
        self._start = self._read()

    @staticmethod
    def _read() -> tuple[int, int] | None:
        try:
            fields = _STAT.read_text().splitlines()[0].split()
        except OSError:
            return None
        # cpu user nice system idle iowait irq softirq steal [guest guest_nice]: guest time
        # is counted in user time already.
        ticks = [int(v) for v in fields[1:9]]
        return ticks[7], sum(ticks)

    def share(self) -> float | None:
        now = self._read()
        if now is None or self._start is None or now[1] <= self._start[1]:
            return None
        return round((now[0] - self._start[0]) / (now[1] - self._start[1]), 4)
