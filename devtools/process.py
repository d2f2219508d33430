"""Processes for the development tools: start them, wait for them, keep them running, stop them.

Written once for the launcher (``devtools.stack``), the chaos run's world
(``devtools.chaos.world``), the benchmark (``devtools.bench.e2e``) and the tests' workers and
sandboxes. The product never imports it (pyproject.toml's import contracts).

Every process starts in a process group of its own: a signal to the group reaches what it
forked (RQ's scheduler, gunicorn's workers), and a Ctrl-C in the terminal reaches only
whoever started it, who then stops things in order.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

REPO = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
POLL_INTERVAL = 0.05
# A supervised process that dies is started again after a pause that doubles, up to the
# second figure, while it keeps dying soon after starting; one that ran RESTART_SETTLED
# seconds starts over at the first.
RESTART_PAUSES = (0.5, 30.0)
RESTART_SETTLED = 60.0

Popen = subprocess.Popen[bytes]


class ProcessError(Exception):
    """A process could not be started or did not become ready; the message says what."""


class Identity(Protocol):
    """Who a process runs as: ``uid`` None is whoever starts it (devtools.stack.users.RunAs)."""

    @property
    def uid(self) -> int | None: ...

    @property
    def gid(self) -> int | None: ...


# --- ports ------------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on HOST that nothing listens on now (the caller races anyone else for it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def accepts_tcp(port: int, *, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


# --- starting and waiting ---------------------------------------------------------------------


def open_log(path: Path) -> int:
    """`path` opened for appending, readable and writable by its owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)  # a file an older run made world-readable
    return fd


def spawn(
    argv: Sequence[str | Path],
    *,
    env: dict[str, str] | None,
    cwd: Path | str = REPO,
    output: Path | int = subprocess.DEVNULL,
    stdin: int = subprocess.DEVNULL,
    run_as: Identity | None = None,
) -> Popen:
    """Start `argv` in a process group of its own, its output (both streams) to `output`: a
    log file (appended to, owner-only), or a file descriptor, ``subprocess.PIPE`` or
    ``DEVNULL``. Whatever it creates is its owner's only (umask 077). As `run_as`, with none
    of our supplementary groups, when that names a user."""
    fd = open_log(output) if isinstance(output, Path) else output
    uid = run_as.uid if run_as is not None else None
    try:
        return subprocess.Popen(  # noqa: S603 - our own programs, argv given as a list
            argv,
            cwd=cwd,
            env=env,
            stdin=stdin,
            stdout=fd,
            stderr=subprocess.STDOUT,
            process_group=0,
            user=uid,
            group=run_as.gid if run_as is not None else None,
            extra_groups=[] if uid is not None else None,
            umask=0o077,
        )
    finally:
        if isinstance(output, Path):
            os.close(fd)


def wait_until(
    ready: Callable[[], object],
    *,
    what: str,
    timeout: float,
    proc: Popen | None = None,
    interval: float = POLL_INTERVAL,
) -> None:
    """Poll `ready()` until it is true; ProcessError if `proc` exits first or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc is not None and proc.poll() is not None:
            raise ProcessError(f"{what} exited with code {proc.returncode} while starting")
        if time.monotonic() > deadline:
            raise ProcessError(f"{what} was not ready within {timeout:g}s")
        time.sleep(interval)


def wait_for_port(port: int, *, what: str, timeout: float, proc: Popen | None = None) -> None:
    wait_until(lambda: accepts_tcp(port), what=f"{what} (port {port})", timeout=timeout, proc=proc)


# --- stopping -----------------------------------------------------------------------------------


def signal_group(proc: Popen, signum: int) -> None:
    """`signum` to `proc`'s group, which outlives its leader while any member lives (so this
    never reaches a stranger that reused the pid); nothing if the group is gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


def wait_exit(proc: Popen, timeout: float) -> bool:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return True


def end(
    *procs: Popen,
    timeout: float = 10.0,
    signum: int = signal.SIGTERM,
    leader_only: bool = False,
) -> list[Popen]:
    """Stop `procs`: `signum` to each one's group (to the process alone with `leader_only`,
    for one that stops its own children: gunicorn, an RQ worker's warm shutdown), then
    SIGKILL to the group of any still running after `timeout` (all waited for at once). What
    any of them left in its group goes too (RQ's scheduler, a forked child). Returns those
    that had to be killed."""
    running = [p for p in procs if p.poll() is None]
    for proc in running:
        if leader_only:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)
        else:
            signal_group(proc, signum)
    deadline = time.monotonic() + timeout
    killed = []
    for proc in running:
        if not wait_exit(proc, max(0.0, deadline - time.monotonic())):
            killed.append(proc)
            signal_group(proc, signal.SIGKILL)
            proc.kill()
            proc.wait()
    for proc in procs:
        signal_group(proc, signal.SIGKILL)
    return killed


def alive(pid: int) -> bool:
    """Whether `pid` is a process that has not exited (a zombie has)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    # A zombie has exited and only waits for its parent (for an orphan, init) to reap it.
    try:
        stat_line = Path("/proc", str(pid), "stat").read_text()
    except OSError:
        return True
    return stat_line.rpartition(")")[2].split()[:1] != ["Z"]


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_INTERVAL)
    return True


# --- keeping it running -----------------------------------------------------------------------


class Supervised:
    """A process that is started again when it dies.

    After a pause that doubles, up to ``pauses[1]``, while it keeps dying within `settled`
    seconds of starting; one that ran that long starts over at ``pauses[0]``. The pause keeps
    a process that cannot start (a broken setting) from spinning; ``(0, 0)`` starts it again
    at once. `start` starts it, and may start it differently each time (the chaos run arms a
    replacement to die); what the dead one left in its group is killed first.
    """

    def __init__(
        self,
        name: str,
        start: Callable[[], Popen],
        *,
        pauses: tuple[float, float] = RESTART_PAUSES,
        settled: float = RESTART_SETTLED,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.name = name
        self._start = start
        self.pauses = pauses
        self.settled = settled
        self.log = log
        self.proc: Popen | None = None
        self.started = 0.0
        self.pause = pauses[0]
        self.due: float | None = None
        self.restarts = 0

    def start(self) -> Popen:
        self.proc = self._start()
        self.started = time.monotonic()
        return self.proc

    def check(self) -> Popen | None:
        """Start it again if it died and its pause is over. Returns the dead process (its
        ``returncode`` says how it ended) when it is first seen dead, else None."""
        now = time.monotonic()
        proc, died = self.proc, None
        if self.due is None and proc is not None and proc.poll() is not None:
            died = proc
            ran = now - self.started
            if ran >= self.settled:
                self.pause = self.pauses[0]
            if self.log is not None:
                self.log(
                    f"{self.name} exited with code {proc.returncode} after {ran:.1f}s; "
                    f"starting it again in {self.pause:g}s"
                )
            self.due = now + self.pause
            self.pause = min(self.pause * 2, self.pauses[1])
        if self.due is not None and now >= self.due:
            if proc is not None:
                signal_group(proc, signal.SIGKILL)  # what it left in its group
                proc.wait()
            self.start()
            self.due = None
            self.restarts += 1
        return died
