"""What every part of the launcher shares: where things are, its errors, its log, its signals."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType

from devtools.process import HOST, REPO, ProcessError

# The project's var/. A module attribute, read when used, so that a test can move it.
VAR = REPO / "var"
MANAGE = REPO / "manage.py"

START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
# RQ's warm shutdown lets the current job finish; past this we kill it, a crash the journal
# is designed to survive (docs/design.md §2: an interrupted step is "unknown", not redone blindly).
WORKER_STOP_TIMEOUT = 15.0

print_lock = threading.Lock()


class StackError(ProcessError):
    """Something could not be set up; the message says what and where to look."""


class PortInUse(StackError):
    """A server's port is taken. For a port we picked, someone took it in the meantime."""


class Interrupted(BaseException):
    """A stop signal arrived. BaseException so that no `except Exception` swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def log(message: str) -> None:
    with print_lock:
        print(f"stack   | {message}", file=sys.stderr, flush=True)


def shown(path: Path) -> str:
    """`path` as the user would type it: relative to the checkout when inside it."""
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


# --- signals ------------------------------------------------------------------------------

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


def note_signal(signum: int, frame: FrameType | None) -> None:
    # Written without log()'s lock: the interrupted main thread may be holding it.
    note = f"stack   | {signal.Signals(signum).name} received; already stopping, please wait\n"
    os.write(sys.stderr.fileno(), note.encode())


def on_stop_signals(handler: Callable[[int, FrameType | None], None]) -> None:
    for signum in _STOP_SIGNALS:
        signal.signal(signum, handler)


# --- ports --------------------------------------------------------------------------------


def env_port(name: str, default: int, environ: Mapping[str, str] | None = None) -> int:
    raw = (os.environ if environ is None else environ).get(name, "").strip()
    if not raw:
        return default
    try:
        port = int(raw)
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise StackError(f"{name}={raw!r} is not a TCP port number")
    return port


def require_free_port(port: int, setting: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR as the servers use it, so a lingering TIME_WAIT does not count as taken.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            raise PortInUse(
                f"port {port} on {HOST} is already in use; stop whatever holds it or set {setting}"
            ) from None
