"""The sandbox providers (``sandbox/``) as processes of their own, on free ports.

For the chaos run, the benchmark and the tests; the launcher starts the demo's under its own
names, ports and user (devtools.stack.sandboxes), with the same environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from devtools.process import HOST, Popen, ProcessError, end, free_port, spawn, wait_until
from sandbox.client import SandboxClient

STARTUP_SECONDS = 30.0

# What a sandbox process inherits from our environment: the basics, who it runs as, and where
# a linked Python's library is (devtools.stack.users.app_python).
SANDBOX_ENVIRONMENT = frozenset(
    {"PATH", "LANG", "LC_ALL", "TZ", "PYTHONUNBUFFERED", "VIRTUAL_ENV"}
    | {"HOME", "USER", "LOGNAME", "LD_LIBRARY_PATH"}
    # Where an app of one's own is (AGENTOPS_APPS, docs/your-own/startkind.md): its sandbox
    # is its module, run as `python -m <app>.sandbox`.
    | {"PYTHONPATH"}
)


def sandbox_environment(env: Mapping[str, str]) -> dict[str, str]:
    """What a sandbox gets of `env`: it stands in for a third party, so nothing of ours but
    what it needs to run (no database or Redis credentials, no secret key)."""
    return {k: v for k, v in env.items() if k in SANDBOX_ENVIRONMENT}


@dataclass
class SandboxHandle:
    name: str
    url: str
    port: int
    client: SandboxClient
    process: Popen


def sandbox_spawn(
    name: str,
    *args: str,
    env: Mapping[str, str] = {},
    output: Path | int = subprocess.DEVNULL,
    client_timeout: float = 2.0,
    module: str = "",
) -> SandboxHandle:
    """Start ``sandbox.<name>`` (or the provider ``module``, as an app declares it:
    ``examples.support.sandbox``) on a free port (not waited for: see sandboxes_ready).
    `env` is added to what it inherits of ours (a webhook secret)."""
    port = free_port()
    argv = [sys.executable, "-m", module or f"sandbox.{name}", "--port", str(port), *args]
    process = spawn(
        argv,
        env={**sandbox_environment(os.environ), **env},
        output=output,
    )
    url = f"http://{HOST}:{port}"
    return SandboxHandle(name, url, port, SandboxClient(url, timeout=client_timeout), process)


def sandboxes_ready(*handles: SandboxHandle, timeout: float = STARTUP_SECONDS) -> None:
    """Wait until each answers its health check; stop them all if one does not."""
    try:
        for handle in handles:
            wait_until(
                handle.client.health,
                what=f"the {handle.name} sandbox",
                timeout=timeout,
                proc=handle.process,
            )
    except ProcessError:
        sandboxes_stop(*handles)
        raise


def sandbox_start(
    name: str, *args: str, output: Path | int = subprocess.DEVNULL, module: str = ""
) -> SandboxHandle:
    handle = sandbox_spawn(name, *args, output=output, module=module)
    sandboxes_ready(handle)
    return handle


def sandboxes_stop(*handles: SandboxHandle, timeout: float = 5.0) -> None:
    end(*(h.process for h in handles), timeout=timeout)
