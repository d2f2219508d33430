"""The app's processes: long-running ones whose output we print (web, worker, sweeper, the
sandboxes), one-off ``manage.py`` commands, the command `test` runs, and the loop that keeps
them running."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from devtools.process import REPO, Popen, Supervised, end, spawn, wait_gone
from devtools.stack import base
from devtools.stack.base import MANAGE, WORKER_STOP_TIMEOUT, Interrupted, StackError, log
from devtools.stack.files import leftover
from devtools.stack.users import OURSELVES, RunAs


def app_pidfile(name: str) -> Path:
    return base.VAR / "run" / f"{name}.pid"


def stop_leftover_app(name: str, argv_has: str = str(MANAGE)) -> None:
    pid = leftover(app_pidfile(name), REPO, argv_has=argv_has)
    if pid is None:
        return
    log(f"stopping {name} (pid {pid}) left running by an earlier run")
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    wait_gone(pid, WORKER_STOP_TIMEOUT)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


class Child:
    """A long-running app process whose output lines we print prefixed with its name.

    It runs as `run_as` (when we are root, an unprivileged user). Its pid goes to
    var/run/NAME.pid, so that a run killed too hard to stop it can be cleaned up after by the
    next one.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str | Path],
        env: dict[str, str],
        stop_timeout: float,
        run_as: RunAs = OURSELVES,
    ) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.stop_timeout = stop_timeout
        self.run_as = run_as
        self.proc: Popen | None = None
        self._pump: threading.Thread | None = None
        self.pidfile = app_pidfile(name)

    def start(self) -> Popen:
        if self._pump is not None:
            self._pump.join(timeout=2.0)  # the output of the one that died
        proc = self.proc = spawn(
            self.argv, env=self.env, output=subprocess.PIPE, run_as=self.run_as
        )
        self._pump = threading.Thread(target=self._copy, args=(proc.stdout,), daemon=True)
        self._pump.start()
        self.pidfile.parent.mkdir(parents=True, exist_ok=True)
        self.pidfile.write_text(f"{proc.pid}\n")
        return proc

    def _copy(self, stream: IO[bytes] | None) -> None:
        if stream is None:
            return
        prefix = f"{self.name:<8}| "
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace").rstrip("\r\n")
            with base.print_lock:
                sys.stdout.write(prefix + line + "\n")
                sys.stdout.flush()

    def stop(self) -> None:
        """SIGTERM to it alone (gunicorn and RQ's worker stop their own children), SIGKILL
        to its group after `stop_timeout`; then anything it left in its group goes too."""
        if self.proc is None:
            return
        if end(self.proc, timeout=self.stop_timeout, leader_only=True):
            log(f"{self.name} did not stop within {self.stop_timeout:.0f}s; killed it")
        self.pidfile.unlink(missing_ok=True)
        if self._pump is not None:
            self._pump.join(timeout=2.0)


def supervised(child: Child) -> Supervised:
    """`child`, started again when it dies (devtools.process.Supervised), and said so."""
    return Supervised(child.name, child.start, log=log)


def watch(processes: Sequence[tuple[str, Popen]], supervised: Sequence[Supervised] = ()) -> int:
    """Wait for a stop signal. A supervised process that dies is started again; any other
    (a server, a sandbox) that exits stops everything."""
    while True:
        for name, proc in processes:
            code = proc.poll()
            if code is not None:
                log(f"{name} exited unexpectedly with code {code}; stopping everything")
                return 1
        for process in supervised:
            process.check()
        time.sleep(0.2)


def manage(
    args: Sequence[str],
    env: dict[str, str],
    python: str = sys.executable,
    run_as: RunAs = OURSELVES,
) -> None:
    result = subprocess.run(  # noqa: S603 - the app's Python and manage.py
        [python, str(MANAGE), *args],
        cwd=REPO,
        env=env,
        user=run_as.uid,
        group=run_as.gid,
        extra_groups=run_as.extra_groups,
        umask=0o077,
        check=False,
    )
    if result.returncode != 0:
        raise StackError(f"manage.py {' '.join(args)} failed with exit code {result.returncode}")


def manage_output(
    args: Sequence[str],
    env: dict[str, str],
    python: str = sys.executable,
    run_as: RunAs = OURSELVES,
) -> str:
    """What ``manage.py ARGS`` prints (it must succeed)."""
    result = subprocess.run(  # noqa: S603 - the app's Python and manage.py
        [python, str(MANAGE), *args],
        cwd=REPO,
        env=env,
        user=run_as.uid,
        group=run_as.gid,
        extra_groups=run_as.extra_groups,
        umask=0o077,
        check=False,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise StackError(f"manage.py {' '.join(args)} failed: {result.stderr.strip()[-500:]}")
    return result.stdout


def run_foreground(cmd: Sequence[str], env: dict[str, str], run_as: RunAs = OURSELVES) -> int:
    """Run `cmd` to its end and return its exit code (128 + N when a signal N ended it)."""
    try:
        # Our own process group, so a Ctrl-C in the terminal reaches CMD directly and it
        # winds down its own way (pytest-django drops its test database) before we go on.
        proc = subprocess.Popen(  # noqa: S603 - the command the launcher was given to run
            cmd, env=env, user=run_as.uid, group=run_as.gid, extra_groups=run_as.extra_groups
        )
    except OSError as error:
        log(f"cannot run {cmd[0]!r}: {error}")
        return 127
    forwarded = False
    while True:
        try:
            code = proc.wait()
            break
        except Interrupted as stop:
            if stop.signum == signal.SIGINT:
                continue  # the terminal sent it to CMD as well
            if forwarded:
                proc.kill()
            else:
                proc.send_signal(stop.signum)
                forwarded = True
    return code if code >= 0 else 128 - code
