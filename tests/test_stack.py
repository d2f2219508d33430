"""The launcher does no harm: what it keeps under var/ is its owner's alone (issue 8).

Checked on the throwaway servers this very test run uses (scripts/stack.py test started
them, with this pytest as its child), and on the helpers that write secrets.
"""

from __future__ import annotations

import contextlib
import importlib.util
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
from types import ModuleType
from typing import IO

import pytest

REPO = Path(__file__).resolve().parents[1]


def _stack() -> ModuleType:
    spec = importlib.util.spec_from_file_location("agentops_stack", REPO / "scripts" / "stack.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _test_root() -> Path:
    """The directory of the servers stack.py started around this run."""
    candidates = [REPO / "var" / f"test-{os.getppid()}"]
    candidates += Path(tempfile.gettempdir()).glob(f"agentops-test-{os.getppid()}-*")
    for root in candidates:
        if root.is_dir():
            return root
    pytest.skip("the servers were not started by scripts/stack.py test")


def _open_to_others(path: Path) -> bool:
    return bool(
        os.lstat(path).st_mode & (stat.S_IRWXG | stat.S_IRWXO) & ~stat.S_IXOTH & ~stat.S_IXGRP
    )


def test_server_data_logs_and_secrets_are_readable_by_their_owner_only() -> None:
    root = _test_root()
    exposed = [
        str(path.relative_to(root))
        for path in [root, *root.rglob("*")]
        if "packages" not in path.relative_to(root).parts  # linked binaries, not data
        and _open_to_others(path)
    ]
    assert exposed == []
    for name in ("postgres.log", "redis.log"):
        assert stat.S_IMODE(os.lstat(root / name).st_mode) == 0o600
    for secret in (root / "secrets").iterdir():
        assert stat.S_IMODE(os.lstat(secret).st_mode) == 0o600


def test_secrets_are_made_owner_only_and_kept(tmp_path: Path) -> None:
    stack = _stack()
    stack._OWN_ROOTS.append(tmp_path)
    first = stack._secret(tmp_path / "secrets" / "x")
    assert stack._secret(tmp_path / "secrets" / "x") == first
    assert stat.S_IMODE(os.stat(tmp_path / "secrets" / "x").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "secrets").st_mode) == 0o700
    (tmp_path / "secrets" / "x").chmod(0o644)  # loosened by hand
    stack._secret(tmp_path / "secrets" / "x")
    assert stat.S_IMODE(os.stat(tmp_path / "secrets" / "x").st_mode) == 0o600


def test_the_launcher_changes_no_permission_outside_its_own_directories(tmp_path: Path) -> None:
    stack = _stack()
    with pytest.raises(stack.StackError, match="outside"):
        stack._private_dir(tmp_path / "elsewhere")
    with pytest.raises(stack.StackError, match="outside"):
        stack.RunAs(uid=65534, gid=65534).own(tmp_path)
    assert "useradd" not in (REPO / "scripts" / "stack.py").read_text()


def test_a_supervised_process_that_dies_is_started_again_after_a_growing_pause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stack = _stack()
    monkeypatch.setattr(stack, "RESTART_PAUSES", (0.05, 0.2))
    child = stack.Child(
        "test-supervised",
        [sys.executable, "-c", "import sys; sys.exit(3)"],
        dict(os.environ),
        stop_timeout=5.0,
    )
    supervised = stack.Supervised(child)
    child.start()
    pids = [child.proc.pid]
    try:
        deadline = time.monotonic() + 30
        while supervised.restarts < 3:
            assert time.monotonic() < deadline, "the dead process was not started again"
            supervised.check(time.monotonic())
            if child.proc.pid != pids[-1]:
                pids.append(child.proc.pid)
            time.sleep(0.01)
        assert len(set(pids)) == 4  # a new process each time
        assert supervised.pause == 0.2  # doubled while it kept dying at once, then capped
    finally:
        child.stop()


def _control(request: str) -> dict[str, object]:
    import json
    import socket

    path = os.environ.get("AGENTOPS_STACK_CONTROL")
    if not path:
        pytest.skip("the servers were not started by scripts/stack.py test")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(60)
        sock.connect(path)
        sock.sendall(request.encode() + b"\n")
        answer: dict[str, object] = json.loads(sock.makefile("r").readline())
    return answer


def test_the_command_may_restart_the_servers_it_was_given_and_nothing_else() -> None:
    import redis

    servers = _control("servers")["servers"]
    assert isinstance(servers, list) and set(servers) <= {"postgres", "redis"}
    assert stat.S_IMODE(os.stat(os.environ["AGENTOPS_STACK_CONTROL"]).st_mode) == 0o600
    if "redis" not in servers:
        pytest.skip("REDIS_URL names a server stack.py did not start")
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    client.set("agentops:test:restart", "1")
    answer = _control("restart redis")
    assert answer["ok"] is True and isinstance(answer["down_s"], float)
    assert client.get("agentops:test:restart") is None  # it came back empty
    assert _control("restart the world")["ok"] is False


# Loads the launcher with its var/ moved to sys.argv[1], then does what `make run` does.
_RUN_ELSEWHERE = """
import importlib.util, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("agentops_stack", sys.argv[2])
stack = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = stack
spec.loader.exec_module(stack)
stack.VAR = Path(sys.argv[1])
stack._OWN_ROOTS[:] = [stack.VAR]
sys.exit(stack.main(["run"]))
"""

# What `make run` starts, by a mark on each process's command line or name.
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


@dataclass(frozen=True)
class _Process:
    pid: int
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
            started = int(_stat(pid)[19])
        except OSError:
            continue
        processes.append(
            _Process(
                pid=pid,
                started=started,
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


def _env_for_a_run_of_its_own(stack: ModuleType) -> dict[str, str]:
    """Our environment without this test run's servers, settings and providers (`run` would
    use them instead of starting its own), with free ports for all it listens on."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name == "AGENTOPS_SERVER_USER"
        or not name.startswith(("AGENTOPS_", "DJANGO_", "DATABASE_", "REDIS_", "STRIPE_", "PG"))
        and name not in {"MAIL_API_BASE", "BOOKINGS_API_BASE"}
    }
    for server in ("WEB", "PG", "REDIS", *(f"SANDBOX_{n.upper()}" for n, *_ in stack.SANDBOXES)):
        env[f"AGENTOPS_{server}_PORT"] = str(stack._free_port())
    return env


def test_launched_as_root_nothing_the_launcher_starts_runs_as_root(tmp_path: Path) -> None:
    """`stack.py run`, with its var/ elsewhere and ports of its own: once the app is up, no
    process below the launcher has root's user or group, real, effective or saved. (Run as
    another user that holds trivially; the run is still checked to come up and stop.) The
    static files show that collectstatic, started like migrate and the seed, did not run as
    root either. From a checkout the unprivileged user cannot reach, `run` must refuse."""
    stack = _stack()
    run_as = stack._server_identity()
    expected_uid = os.geteuid() if run_as.uid is None else run_as.uid
    closed = stack._blocked_for(run_as, stack.MANAGE)
    var = Path(tempfile.mkdtemp(prefix=f"agentops-test-{os.getpid()}-"))
    said: queue.Queue[str | None] = queue.Queue()
    with (tmp_path / "run.out").open("wb") as out:
        launcher = subprocess.Popen(
            [sys.executable, "-c", _RUN_ELSEWHERE, str(var), str(REPO / "scripts" / "stack.py")],
            cwd=REPO,
            env=_env_for_a_run_of_its_own(stack),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
        )

    def read_log(stream: IO[str]) -> None:
        for line in stream:
            said.put(line)
        said.put(None)

    assert launcher.stderr is not None
    reader = threading.Thread(target=read_log, args=(launcher.stderr,), daemon=True)
    reader.start()
    log: list[str] = []
    below: list[_Process] = []
    try:
        deadline = time.monotonic() + 300
        while not any("agentops is up at" in line for line in log):
            try:
                line = said.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail("the app was not up within 300s:\n" + "".join(log))
            if line is None:  # the launcher closed its log: it stopped
                break
            log.append(line)
        if closed:
            assert launcher.wait(timeout=60) == 1
            assert f"{closed} is closed to other users" in "".join(log)
            return
        assert any("agentops is up at" in line for line in log), "".join(log)
        below = _descendants(launcher.pid)
        running = {
            what
            for what, mark in _RUN_PROCESSES.items()
            if any(mark(p.name, p.argv) for p in below)
        }
        assert running == set(_RUN_PROCESSES)
        as_root = [
            (p.pid, p.argv[:100], p.uids, p.gids, p.groups)
            for p in below
            if 0 in p.uids + p.gids + p.groups
        ]
        assert as_root == []
        static = [p for p in (var / "staticfiles").rglob("*") if p.is_file()]
        assert static, "collectstatic wrote nothing"
        assert {p.stat().st_uid for p in static} == {expected_uid}
    finally:
        launcher.send_signal(signal.SIGTERM)
        try:
            code = launcher.wait(timeout=120)
        except subprocess.TimeoutExpired:
            launcher.kill()
            code = launcher.wait()
        reader.join(timeout=10)
        survivors = [p for p in below if _still_running(p)]
        for process in survivors:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
        shutil.rmtree(var, ignore_errors=True)
    assert code == 0, "".join(log)
    assert survivors == []
