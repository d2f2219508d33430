"""The chaos run's progress: a bar on a terminal, a line every few seconds anywhere
else.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TextIO


@dataclass
class Bar:
    """A progress bar on a terminal; a line every few seconds anywhere else (a CI log)."""

    out: TextIO | None
    label: str
    every: float = 10.0
    last: float = 0.0
    drawn: bool = False

    def show(self, done: int, total: int, note: str, *, force: bool = False) -> None:
        if self.out is None:
            return
        tty = self.out.isatty()
        now = time.monotonic()
        if not force and now - self.last < (0.5 if tty else self.every):
            return
        self.last = now
        width = 24
        filled = int(width * done / max(1, total))
        line = f"{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {note}"
        if tty:
            self.out.write("\r" + line.ljust(110)[:140])
            self.drawn = True
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def close(self) -> None:
        if self.out is not None and self.drawn:
            self.out.write("\n")
            self.out.flush()
