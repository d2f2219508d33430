"""What a benchmark ran on and against: the machine, the database's durability, the code.

A figure means little without these: the same code is twice as fast on a quiet machine, and
a PostgreSQL with fsync off is not the one users run.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from django.db import connection

from devtools.process import REPO

# The code a figure is about: a change anywhere else (docs, tests) leaves it the same code.
PRODUCT_PATHS = ("journal", "agentops", "commerce", "sandbox", "devtools/bench")


def _cpu_model() -> str:
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _hypervisor() -> str:
    product = Path("/sys/class/dmi/id/product_name")
    if product.exists():
        return product.read_text().strip()
    with open("/proc/cpuinfo") as cpuinfo:
        return "a virtual machine" if " hypervisor" in cpuinfo.read() else "bare metal"


def _memory_gib() -> float:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    return 0.0


def _git(*args: str) -> str:
    return subprocess.run(  # noqa: S603 - git, with arguments of our own
        ["git", *args],  # noqa: S607 - whichever git the developer has
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()


def code() -> dict[str, Any]:
    """The commit measured, and whether the product's code differed from it."""
    changed = _git("status", "--porcelain", "--", *PRODUCT_PATHS)
    return {"commit": _git("rev-parse", "HEAD"), "uncommitted_changes": bool(changed)}


def machine() -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('server_version')")
        server = cursor.fetchone()[0]
        durability = {}
        for name in ("fsync", "synchronous_commit", "full_page_writes", "shared_buffers"):
            cursor.execute("SELECT current_setting(%s)", [name])
            durability[name] = cursor.fetchone()[0]
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "platform": _hypervisor(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "postgresql": server,
        "postgresql_settings": durability,
    }
