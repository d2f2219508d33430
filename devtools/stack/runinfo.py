"""What `run` tells `manage`: the ports it started its servers on and the settings it gave the
app, in var/run/stack.json (the launcher's own, owner-only directory), so that
``stack.py manage -- …`` reaches the servers `make run` started, whatever ports it was given.

No secret goes in the file: the passwords stay in var/secrets/, and a per-run secret (the
sandbox's webhook secret) is left out, as the commands `manage` runs never need it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from devtools.stack import base

# Which ports `run` used, by the variable that sets each.
PORT_VARIABLES = ("AGENTOPS_PG_PORT", "AGENTOPS_REDIS_PORT", "AGENTOPS_WEB_PORT")
# The app's settings `run` passes on (the sandboxes' addresses and the like), never these.
NOT_PASSED_ON = (
    "DATABASE_URL",
    "DATABASE_OWNER_URL",
    "DATABASE_WEB_URL",
    "DATABASE_WORKER_URL",
    "REDIS_URL",
    "DJANGO_SECRET_KEY",
)


def run_file() -> Path:
    return base.VAR / "run" / "stack.json"


def run_info_write(
    *, ports: Mapping[str, int], settings: Mapping[str, str], given: list[str]
) -> None:
    """Record what this `run` started: ``ports`` by variable, the app ``settings`` it made
    (secrets left out), and the server URLs the user ``given`` (DATABASE_URL, REDIS_URL)."""
    passed = {
        name: value
        for name, value in settings.items()
        if name not in NOT_PASSED_ON and "SECRET" not in name and "PASSWORD" not in name
    }
    info = {"ports": dict(ports), "settings": passed, "given": sorted(given)}
    path = run_file()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(info, f, indent=2, sort_keys=True)
    path.with_suffix(".tmp").replace(path)


def run_info() -> dict[str, Any]:
    """What the last `run` recorded; empty when it never ran (or the file is unreadable)."""
    try:
        info = json.loads(run_file().read_text())
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def manage_environment(env: dict[str, str], info: Mapping[str, Any]) -> str:
    """Fill ``env`` for `manage` from what `run` recorded: its ports (unless set here), its
    settings (unless set here). Returns why `manage` cannot reach `run`'s servers, or ""."""
    for name, port in (info.get("ports") or {}).items():
        if name in PORT_VARIABLES and not env.get(name):
            env[name] = str(port)
    for name, value in (info.get("settings") or {}).items():
        env.setdefault(name, str(value))
    missing = [name for name in info.get("given") or () if not env.get(name)]
    if missing:
        return (
            f"`make run` was given {' and '.join(missing)} and started no server of its own "
            f"for {'them' if len(missing) > 1 else 'it'}: set the same "
            f"{' and '.join(missing)} for `manage` too"
        )
    return ""
