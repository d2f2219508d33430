"""The launcher does no harm: what it keeps under var/ is its owner's alone (issue 8).

Checked on the throwaway servers this very test run uses (scripts/stack.py test started
them, with this pytest as its child), and on the helpers that write secrets.
"""

from __future__ import annotations

import importlib.util
import os
import stat
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

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
