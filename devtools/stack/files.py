"""What the launcher keeps under var/: owner-only directories, files and secrets, the logs it
reads back, and the pid files that find a process an earlier run left behind."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

from devtools.process import alive, open_log
from devtools.stack import base
from devtools.stack.base import StackError

# Directories besides var/ whose permissions we may set: throwaway runtime directories we
# made ourselves (devtools.stack.users.throwaway_runtime, app_python).
OWN_ROOTS: list[Path] = []


def inside_var(path: Path) -> None:
    # We change permissions only on what we made: the project's own var/ and below.
    resolved = path.resolve()
    for root in [base.VAR, *OWN_ROOTS]:
        if resolved == root.resolve() or root.resolve() in resolved.parents:
            return
    raise StackError(f"refusing to change permissions of {path}: it is outside {base.VAR}")


def private_dir(path: Path, *, traversable: bool = False) -> Path:
    """Make `path` (under var/) a directory only its owner may read.

    `traversable` lets other users pass through it without listing it (o+x): the user that
    runs PostgreSQL and Redis when we are root must reach its own directory below.
    """
    inside_var(path)
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o711 if traversable else 0o700)
    return path


def private_file(path: Path) -> int:
    """Open `path` (under var/) for appending, readable and writable by its owner only."""
    inside_var(path)
    return open_log(path)


def secret(path: Path, *, prefix: str = "", nbytes: int = 32) -> str:
    """The secret kept in `path` (owner-only, under var/), generated on first use.

    Secrets reach the processes that need them through their environment or such files,
    never their command line, which every user of the machine can read (`ps`).
    """
    private_dir(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        os.chmod(path, 0o600)
        value = path.read_text().strip()
        if not value:
            raise StackError(f"{path} is empty; delete it and start again") from None
        return value
    value = prefix + secrets.token_urlsafe(nbytes)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    return value


def log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def tail(path: Path, since: int = 0, lines: int = 30) -> str:
    try:
        with path.open("rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
    except OSError:
        return f"    (no log at {path})"
    kept = text.splitlines()[-lines:] or ["(empty)"]
    return "\n".join(f"    {line}" for line in kept)


def leftover(pidfile: Path, workdir: Path, *, comm: str = "", argv_has: str = "") -> int | None:
    """The pid in `pidfile` if it is still the process an earlier run started there.

    Such a process outlived a run that was killed too hard to clean up (SIGKILL). It must be
    named `comm` (or have `argv_has` in its command line) and work in `workdir` (the servers
    chdir to their data directory): that tells it apart from a stranger that reused the pid.
    """
    try:
        pid = int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if pid <= 0 or pid == os.getpid() or not alive(pid):
        return None
    proc = Path("/proc", str(pid))
    if proc.is_dir():
        try:
            name = (proc / "comm").read_text().strip()
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
            cwd = Path(os.readlink(proc / "cwd"))
        except OSError:
            return None
        if cwd != workdir.resolve():
            return None
    else:
        # No /proc (macOS): the process's name and arguments are the best evidence there is.
        ps = subprocess.run(  # noqa: S603 - the system's ps, wherever PATH finds it
            ["ps", "-p", str(pid), "-o", "comm=,command="],  # noqa: S607
            capture_output=True,
            text=True,
            check=False,
        )
        name, _, rest = ps.stdout.strip().partition(" ")
        name, argv = Path(name).name, rest.split()
    if comm and name == comm:
        return pid
    if argv_has and any(argv_has in arg for arg in argv):
        return pid
    return None
