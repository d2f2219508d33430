"""The code a chaos run ran, recorded with its figures."""

from __future__ import annotations

import subprocess
from typing import Any

from devtools.process import REPO


def code_ran() -> dict[str, Any]:
    """The code a run ran: the checkout's commit, and whether its files were as committed,
    with nothing untracked beside them (``clean``); None for either when git cannot tell.
    The README's figures must come from a run of the code they describe."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(  # noqa: S603 - git, with our own arguments
                ["git", "-C", str(REPO), *args],  # noqa: S607 - git from the PATH
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

    status = git("status", "--porcelain")
    return {"commit": git("rev-parse", "HEAD"), "clean": None if status is None else not status}
