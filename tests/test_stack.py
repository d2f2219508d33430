"""The launcher does no harm: what it keeps under var/ is its owner's alone (issue 8).

Checked on the throwaway servers this very test run uses (devtools.stack test started
them, with this pytest as its child), and on the helpers that write secrets.
"""

from __future__ import annotations

import contextlib
import errno
import os
import queue
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest
import redis

from agentops.effects import registry
from devtools.process import Supervised, free_port
from devtools.stack import base, files, users
from devtools.stack.app import Child
from devtools.stack.base import StackError
from devtools.stack.cli import METRICS_VARIABLE
from devtools.stack.control import CONTROL_VARIABLE, stack_control
from devtools.stack.users import DEFAULT_APP_USER, RunAs, app_identity, server_identity

REPO = Path(__file__).resolve().parents[1]


def _test_root() -> Path:
    """The directory of the servers the launcher started around this run."""
    candidates = [REPO / "var" / f"test-{os.getppid()}"]
    candidates += Path(tempfile.gettempdir()).glob(f"agentops-test-{os.getppid()}-*")
    found = [root for root in candidates if root.is_dir()]
    assert found, "the launcher's directory for this run (its marker says it started both)"
    return found[0]


def _open_to_others(path: Path) -> bool:
    return bool(
        os.lstat(path).st_mode & (stat.S_IRWXG | stat.S_IRWXO) & ~stat.S_IXOTH & ~stat.S_IXGRP
    )


@pytest.mark.stack("postgres", "redis")
def test_server_data_logs_and_secrets_are_readable_by_their_owner_only() -> None:
    root = _test_root()
    exposed = [
        str(path.relative_to(root))
        for path in [root, *root.rglob("*")]
        if "packages" not in path.relative_to(root).parts  # linked binaries, not data
        # The processes' metrics files (prometheus-client makes them by the umask): counts,
        # no secret, in a directory only its owner may enter (checked below).
        and "prometheus" not in path.relative_to(root).parts[:1]
        and _open_to_others(path)
    ]
    assert exposed == []
    assert stat.S_IMODE(os.lstat(root / "prometheus").st_mode) == 0o700
    for name in ("postgres.log", "redis.log"):
        assert stat.S_IMODE(os.lstat(root / name).st_mode) == 0o600
    for secret in (root / "secrets").iterdir():
        assert stat.S_IMODE(os.lstat(secret).st_mode) == 0o600


def test_secrets_are_made_owner_only_and_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "OWN_ROOTS", [tmp_path])
    first = files.secret(tmp_path / "secrets" / "x")
    assert files.secret(tmp_path / "secrets" / "x") == first
    assert stat.S_IMODE(os.stat(tmp_path / "secrets" / "x").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "secrets").st_mode) == 0o700
    (tmp_path / "secrets" / "x").chmod(0o644)  # loosened by hand
    files.secret(tmp_path / "secrets" / "x")
    assert stat.S_IMODE(os.stat(tmp_path / "secrets" / "x").st_mode) == 0o600


def test_the_launcher_changes_no_permission_outside_its_own_directories(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="outside"):
        files.private_dir(tmp_path / "elsewhere")
    with pytest.raises(StackError, match="outside"):
        RunAs(uid=65534, gid=65534).own(tmp_path)
    for module in (REPO / "devtools").rglob("*.py"):
        assert "useradd" not in module.read_text(), module


def test_a_supervised_process_that_dies_is_started_again_after_a_growing_pause() -> None:
    child = Child(
        "test-supervised",
        [sys.executable, "-c", "import sys; sys.exit(3)"],
        dict(os.environ),
        stop_timeout=5.0,
    )
    supervised = Supervised(child.name, child.start, pauses=(0.05, 0.2))
    pids = [supervised.start().pid]
    deaths = []
    try:
        deadline = time.monotonic() + 30
        while supervised.restarts < 3:
            assert time.monotonic() < deadline, "the dead process was not started again"
            if (dead := supervised.check()) is not None:
                deaths.append(dead.returncode)
            assert supervised.proc is not None
            if supervised.proc.pid != pids[-1]:
                pids.append(supervised.proc.pid)
            time.sleep(0.01)
        assert len(set(pids)) == 4  # a new process each time
        assert deaths == [3, 3, 3]  # each death told once, with how it ended
        assert supervised.pause == 0.2  # doubled while it kept dying at once, then capped
    finally:
        child.stop()


def _control(request: str) -> dict[str, Any]:
    answer = stack_control(request)
    assert answer is not None, "the launcher runs this test (its marker says so)"
    return answer


@pytest.mark.stack("redis")
def test_the_command_may_restart_the_servers_it_was_given_and_nothing_else() -> None:
    servers = _control("servers")["servers"]
    assert set(servers) <= {"postgres", "redis"}
    assert stat.S_IMODE(os.stat(os.environ[CONTROL_VARIABLE]).st_mode) == 0o600
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    client.set("agentops:test:restart", "1")
    answer = _control("restart redis")
    assert answer["ok"] is True and isinstance(answer["down_s"], float)
    assert client.get("agentops:test:restart") is None  # it came back empty
    assert _control("restart the world")["ok"] is False


# The launcher with its var/ moved to sys.argv[1], doing what `make run` does.
_RUN_ELSEWHERE = """
import sys
from pathlib import Path
from devtools.stack import base
from devtools.stack.cli import main
base.VAR = Path(sys.argv[1])
sys.exit(main(sys.argv[2:] or ["run"]))
"""

# What `make run` starts, by a mark on each process's command line or name (a process's
# children, as gunicorn's workers and RQ's scheduler, share its command line).
_RUN_PROCESSES: dict[str, Callable[[str, str], bool]] = {
    "postgres": lambda name, argv: name == "postgres",
    "redis": lambda name, argv: name == "redis-server",
    "web": lambda name, argv: "agentops.gunicorn_conf" in argv,
    "worker": lambda name, argv: "manage.py rqworker" in argv,
    "sweeper": lambda name, argv: "manage.py sweep" in argv,
    "payments sandbox": lambda name, argv: "sandbox.payments" in argv,
    "mail sandbox": lambda name, argv: "sandbox.mail" in argv,
    "bookings sandbox": lambda name, argv: "sandbox.bookings" in argv,
}
# Those that run as the app's user (AGENTOPS_APP_USER); the others (the servers and the
# sandboxes, which stand in for the outside world) as the servers' (AGENTOPS_SERVER_USER).
_APP_PROCESSES = {"web", "worker", "sweeper"}
# gunicorn's workers in the run below (WEB_CONCURRENCY).
_WEB_WORKERS = 2


@dataclass(frozen=True)
class _Process:
    pid: int
    parent: int
    started: int  # in clock ticks after boot: with the pid, it names one process
    name: str
    argv: str
    uids: tuple[int, ...]  # real, effective, saved, file system
    gids: tuple[int, ...]
    groups: tuple[int, ...]


def _stat(pid: int) -> list[str]:
    # The fields after the name, which may hold spaces and parentheses itself.
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def _descendants(ancestor: int) -> list[_Process]:
    """Every process below `ancestor`, read from /proc; one that ends meanwhile is left out."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                parents[int(entry.name)] = int(_stat(int(entry.name))[1])
    below = {ancestor}
    while grown := {pid for pid, parent in parents.items() if parent in below} - below:
        below |= grown
    processes = []
    for pid in sorted(below - {ancestor}):
        try:
            status = dict(
                line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            )
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            fields = _stat(pid)
        except OSError:
            continue
        processes.append(
            _Process(
                pid=pid,
                parent=int(fields[1]),
                started=int(fields[19]),
                name=status["Name"].strip(),
                argv=argv.decode(errors="replace").strip(),
                uids=tuple(int(n) for n in status["Uid"].split()),
                gids=tuple(int(n) for n in status["Gid"].split()),
                groups=tuple(int(n) for n in status["Groups"].split()),
            )
        )
    return processes


def _still_running(process: _Process) -> bool:
    try:
        stat_fields = _stat(process.pid)
    except OSError:
        return False
    return int(stat_fields[19]) == process.started and stat_fields[0] != "Z"


def _env_for_a_run_of_its_own() -> dict[str, str]:
    """Our environment without this test run's servers, settings and providers (`run` would
    use them instead of starting its own), with free ports for all it listens on."""
    sandboxes = list(registry.sandboxes.values())
    # The settings that point the app at a provider: with one set, `run` starts no sandbox.
    providers = {s.unless for s in sandboxes} | {k for s in sandboxes for k in s.settings}
    env = {
        name: value
        for name, value in os.environ.items()
        if name in {"AGENTOPS_SERVER_USER", "AGENTOPS_APP_USER"}
        or not name.startswith(("AGENTOPS_", "DJANGO_", "DATABASE_", "REDIS_", "PG"))
        and name not in providers
        and name != METRICS_VARIABLE  # this test run's
    }
    for server in ("WEB", "PG", "REDIS"):
        env[f"AGENTOPS_{server}_PORT"] = str(free_port())
    for sandbox in sandboxes:
        env[sandbox.port_setting] = str(free_port())
    env["WEB_CONCURRENCY"] = str(_WEB_WORKERS)
    return env


def _kinds(processes: list[_Process]) -> dict[str, list[_Process]]:
    """`processes` by what `make run` started them as (_RUN_PROCESSES)."""
    return {
        what: [p for p in processes if mark(p.name, p.argv)]
        for what, mark in _RUN_PROCESSES.items()
    }


def _children(processes: list[_Process], parents: list[_Process]) -> list[_Process]:
    pids = {p.pid for p in parents}
    return [p for p in processes if p.parent in pids]


def _all_started(launcher: int, deadline: float) -> list[_Process]:
    """The processes below `launcher` once each of _RUN_PROCESSES runs, gunicorn with its
    workers and the RQ worker with its scheduler (they start after the app says it is up)."""
    while True:
        below = _descendants(launcher)
        kinds = _kinds(below)
        if (
            all(kinds.values())
            and len(_children(kinds["web"], kinds["web"])) >= _WEB_WORKERS
            and _children(kinds["worker"], kinds["worker"])
        ):
            return below
        if time.monotonic() > deadline:
            shown = "\n".join(f"{p.pid} {p.parent} {p.argv[:100]}" for p in below)
            pytest.fail(f"not everything was running within the deadline:\n{shown}")
        time.sleep(0.05)


def _opened_as(uid: int, gid: int, paths: list[tuple[Path, int]]) -> list[str]:
    """What opening each (path, flags) gives a process of user `uid` (group `gid`, no other):
    "ok" or the error's name. Tried in a forked child that drops root for that user."""
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no pytest, no Python-level locks, only system calls
        code = 1
        try:
            os.close(reading)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            answers = []
            for path, flags in paths:
                try:
                    os.close(os.open(path, flags))
                    answers.append("ok")
                except OSError as error:
                    answers.append(errno.errorcode.get(error.errno or 0, str(error.errno)))
            os.write(writing, "\n".join(answers).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(writing)
    with os.fdopen(reading, "rb") as answer:
        said = answer.read().decode()
    assert os.waitpid(pid, 0)[1] == 0, "the child could not become that user"
    return said.split("\n")


def test_the_app_runs_as_an_unprivileged_user_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Launched as root, the app's user is neither root nor the servers' user, and exists."""
    import pwd

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("AGENTOPS_SERVER_USER", "nobody")
    monkeypatch.delenv("AGENTOPS_APP_USER", raising=False)
    try:
        pwd.getpwnam("nobody")
        pwd.getpwnam(DEFAULT_APP_USER)
    except KeyError:
        pytest.skip(f"this machine lacks Debian's users nobody and {DEFAULT_APP_USER}")
    servers = server_identity()
    app = app_identity(servers)
    assert app.name == DEFAULT_APP_USER
    assert app.uid not in {0, servers.uid}
    for name, refusal in [
        ("nobody", "is the user PostgreSQL and Redis run as"),
        ("root", "is root"),
        ("agentops-no-such-user", "does not exist"),
    ]:
        monkeypatch.setenv("AGENTOPS_APP_USER", name)
        with pytest.raises(StackError, match=refusal):
            app_identity(servers)


def test_launched_as_root_nothing_the_launcher_starts_runs_as_root(tmp_path: Path) -> None:
    """`stack.py run`, with its var/ elsewhere and ports of its own: once the app is up, no
    process below the launcher has root's user or group, real, effective or saved. The app
    (gunicorn's master and workers, the RQ worker and its scheduler, the sweeper) runs as
    the app's user; PostgreSQL, Redis and the sandboxes as the servers', another one; and
    the app's user can open neither the servers' data nor their environments, nor the
    secrets and logs. (Run as another user all of that holds trivially; the run is still
    checked to come up and stop.) The static files show that collectstatic, started like
    migrate and the seed, ran as the app's user too. From a checkout the unprivileged users
    cannot reach, `run` must refuse."""
    servers = server_identity()
    app = app_identity(servers)
    me = (os.geteuid(), os.getegid())
    server_ids = me if servers.uid is None or servers.gid is None else (servers.uid, servers.gid)
    app_ids = me if app.uid is None or app.gid is None else (app.uid, app.gid)
    blocked = (users.blocked_for(user, base.MANAGE) for user in (app, servers))
    closed = next((path for path in blocked if path is not None), None)
    var = Path(tempfile.mkdtemp(prefix=f"agentops-test-{os.getpid()}-"))
    env = _env_for_a_run_of_its_own()
    run = _Run(var, env, tmp_path / "run.out")
    log = run.log
    below: list[_Process] = []
    try:
        run.wait_up()
        launcher = run.launcher
        if closed:
            assert launcher.wait(timeout=60) == 1
            assert f"{closed} is closed to other users" in "".join(log)
            return
        assert any("agentops is up at" in line for line in log), "".join(log)
        below = _all_started(launcher.pid, time.monotonic() + 60)
        as_root = [
            (p.pid, p.argv[:100], p.uids, p.gids, p.groups)
            for p in below
            if 0 in p.uids + p.gids + p.groups
        ]
        assert as_root == []
        kinds = _kinds(below)
        wrong_user = []
        for what, processes in kinds.items():
            uid, gid = app_ids if what in _APP_PROCESSES else server_ids
            wrong_user += [
                (what, p.pid, p.uids, p.gids)
                for p in processes
                if (p.uids, p.gids) != ((uid,) * 4, (gid,) * 4)
            ]
        assert wrong_user == []
        # Nothing else below the launcher either (PostgreSQL's own children included).
        assert {p.uids[0] for p in below} <= {app_ids[0], server_ids[0]}
        static = [p for p in (var / "staticfiles").rglob("*") if p.is_file()]
        assert static, "collectstatic wrote nothing"
        assert {p.stat().st_uid for p in static} == {app_ids[0]}
        if app.uid is not None:
            assert app_ids[0] != server_ids[0]
            for data in (var / "pg", var / "redis"):
                st = os.stat(data)
                assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (server_ids[0], 0o700)
            server_pids = [
                p.pid
                for what, processes in kinds.items()
                if what not in _APP_PROCESSES
                for p in processes
                if p.parent == launcher.pid
            ]
            closed_to_app = [
                (var / "pg", os.O_RDONLY | os.O_DIRECTORY),
                (var / "pg" / "PG_VERSION", os.O_RDONLY),
                (var / "pg" / "global" / "pg_control", os.O_RDWR),
                (var / "redis", os.O_RDONLY | os.O_DIRECTORY),
                *((kept, os.O_RDONLY) for kept in (var / "redis").iterdir()),
                (var / "secrets", os.O_RDONLY | os.O_DIRECTORY),
                *((secret, os.O_RDONLY) for secret in (var / "secrets").iterdir()),
                (var / "log" / "postgres.log", os.O_RDONLY),
                (var / "log" / "redis.log", os.O_RDONLY),
                *((Path(f"/proc/{pid}/environ"), os.O_RDONLY) for pid in server_pids),
            ]
            # What proves the child was the app's user and /proc answers it: its own.
            web_master = next(p for p in kinds["web"] if p.parent == launcher.pid)
            open_to_app = [
                (static[0], os.O_RDONLY),
                (Path(f"/proc/{web_master.pid}/environ"), os.O_RDONLY),
            ]
            tried = closed_to_app + open_to_app
            answers = _opened_as(app_ids[0], app_ids[1], tried)
            assert dict(zip([str(path) for path, _ in tried], answers, strict=True)) == {
                **{str(path): "EACCES" for path, _ in closed_to_app},
                **{str(path): "ok" for path, _ in open_to_app},
            }
        first = _demo_tasks(log)
        # `stack.py manage` runs a command as the app runs: told every setting the launcher
        # gave the app, it is warned about none of them (agentops.W301 was one).
        checked = subprocess.run(
            [sys.executable, "-c", _RUN_ELSEWHERE, str(var), "manage", "--", "check"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert checked.returncode == 0, checked.stderr
        said = checked.stdout + checked.stderr
        assert "System check identified no issues" in said, said
        # Ctrl-C, as a terminal sends it: SIGINT to the launcher and everything it started.
        code, survivors = run.stop(below, ctrl_c=True)
        assert code == 0, "".join(log)
        assert survivors == []
        # Started again on the data it made: it comes up, says the password is not shown
        # again, and shows the first run's demo tasks (the seed starts none anew).
        again = _Run(var, env, tmp_path / "again.out")
        run = again
        again.wait_up()
        said_again = "".join(again.log)
        assert "agentops is up at" in said_again, said_again
        assert "with the password shown on the first run" in said_again
        assert first and _demo_tasks(again.log) == first
        below = _all_started(again.launcher.pid, time.monotonic() + 60)
    finally:
        code, survivors = run.stop(below)
        shutil.rmtree(var, ignore_errors=True)
    assert code == 0, "".join(run.log)
    assert survivors == []


def _demo_tasks(log: list[str]) -> list[str]:
    """The demo's tasks whose pages `run` ends its start-up with ("... of <task> (...):")."""
    return [line.split(" of ", 1)[1].split(" ", 1)[0] for line in log if "'s page of " in line]


class _Run:
    """`stack.py run` with its var/ at `var`, its log read line by line as it comes."""

    def __init__(self, var: Path, env: dict[str, str], out: Path) -> None:
        self.said: queue.Queue[str | None] = queue.Queue()
        self.log: list[str] = []
        with out.open("wb") as stdout:
            self.launcher = subprocess.Popen(
                [sys.executable, "-c", _RUN_ELSEWHERE, str(var)],
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=subprocess.PIPE,
                text=True,
                # A process group of its own, as a terminal gives a command it runs.
                process_group=0,
            )
        assert self.launcher.stderr is not None
        self.reader = threading.Thread(target=self._read, args=(self.launcher.stderr,), daemon=True)
        self.reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.said.put(line)
        self.said.put(None)

    def wait_up(self, timeout: float = 300) -> None:
        """Until the app has said it is up and how to use it (the summary's last line), or
        the launcher stops (its log closes)."""
        deadline = time.monotonic() + timeout
        while not any("Ctrl-C stops everything" in line for line in self.log):
            try:
                line = self.said.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"the app was not up within {timeout:g}s:\n" + "".join(self.log))
            if line is None:  # the launcher closed its log: it stopped
                break
            self.log.append(line)

    def stop(self, below: list[_Process], *, ctrl_c: bool = False) -> tuple[int, list[_Process]]:
        """SIGTERM to the launcher, or with `ctrl_c` SIGINT to its process group (what a
        terminal's Ctrl-C does); the launcher's exit code and what outlived it."""
        if ctrl_c:
            os.killpg(self.launcher.pid, signal.SIGINT)
        else:
            self.launcher.send_signal(signal.SIGTERM)
        try:
            code = self.launcher.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.launcher.kill()
            code = self.launcher.wait()
        self.reader.join(timeout=10)
        while (line := self.said.get_nowait() if not self.said.empty() else None) is not None:
            self.log.append(line)
        survivors = [p for p in below if _still_running(p)]
        for process in survivors:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
        return code, survivors
