"""How much of a stretch of time the host gave to others: what the measured runs are read beside.

This machine is a virtual one that shares its cores: the same work takes a third longer in
one minute than in the next, and a soak's last waves run minutes after its first. Each soak
wave, bench round and end-to-end run reads how much of the machine's CPU time the hypervisor
took for others while it ran (:class:`Steal`, Linux's ``/proc/stat``). It corrects no figure,
and it is not the whole of a shared host's slowness (a neighbour's load on the caches shows in
no counter): it says how much time the host took away.
"""

from __future__ import annotations

from pathlib import Path

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
