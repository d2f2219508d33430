"""The processes of a chaos run, and the faults done to them.

The run starts its own world: the three sandbox providers (fresh ledgers, its faults), the
web app that receives the payment provider's webhooks (gunicorn, as ``make run`` serves
it), RQ workers and, for the safe harness, the sweeper — real processes, each in its own
process group, against the run's PostgreSQL and Redis. It supervises the workers as
``make run`` does (one that dies is started again) and breaks things on cue: a worker
killed or stopped, a provider down. PostgreSQL and Redis belong to whoever started them:
``scripts/stack.py`` restarts them when asked through its control socket
(``AGENTOPS_STACK_CONTROL``); without one, those faults are skipped and said so.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from django.conf import settings
from django.db import connection

from agentops.chaos.plan import Plan
from agentops.workers import WORKER_ARGS
from sandbox.client import SandboxClient

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
STARTUP_SECONDS = 30.0
CONTROL_VARIABLE = "AGENTOPS_STACK_CONTROL"
PROVIDERS = ("payments", "mail", "bookings")
NAIVE_WORKER_CLASS = "agentops.chaos.naive.NaiveWorker"
# What a sandbox process inherits: it is a third party and gets none of our credentials.
SANDBOX_ENVIRONMENT = frozenset({"PATH", "LANG", "LC_ALL", "TZ", "VIRTUAL_ENV"})


T = TypeVar("T")


class WorldError(Exception):
    """The world could not be set up; the message says what and where to look."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def database_url() -> str:
    """The app's own database, as this process is connected to it (the test database too)."""
    s = connection.settings_dict
    password = f":{s['PASSWORD']}" if s["PASSWORD"] else ""
    return f"postgres://{s['USER']}{password}@{s['HOST']}:{s['PORT']}/{s['NAME']}"


def stack_control(request: str, timeout: float = 120.0) -> dict[str, Any] | None:
    """Ask ``scripts/stack.py`` (when it runs us) to act on its servers; None without it."""
    path = os.environ.get(CONTROL_VARIABLE, "")
    if not path:
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
            sock.sendall(request.encode() + b"\n")
            reply = sock.makefile("r").readline()
        except OSError as exc:
            return {"ok": False, "error": f"the stack's control socket: {exc}"}
    answer: dict[str, Any] = json.loads(reply) if reply else {"ok": False, "error": "no reply"}
    return answer


def restartable_servers() -> set[str]:
    """The servers this run may restart: those ``scripts/stack.py`` started for it."""
    answer = stack_control("servers", timeout=5.0)
    return set(answer.get("servers", [])) if answer and answer.get("ok") else set()


@dataclass
class Slot:
    """One worker position: the process in it now, and what the next one is started with."""

    index: int
    proc: subprocess.Popen[bytes] | None = None
    armed: str = ""
    """The AGENTOPS_CHAOS_KILL the process in it was started with."""
    arm_next: str = ""
    killed: bool = False
    """Its process was killed by the run (not a death of its own)."""
    stopped_until: float | None = None


@dataclass(frozen=True)
class Death:
    """A worker process that ended: when it was seen, how, and what it was armed with."""

    slot: int
    pid: int
    code: int
    at: float
    armed: str
    killed: bool


@dataclass
class World:
    plan: Plan
    harness: str
    workers: int
    workdir: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    slots: list[Slot] = field(default_factory=list)
    providers: dict[str, SandboxClient] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    started_workers: int = 0

    @property
    def logs(self) -> Path:
        return self.workdir / "logs"

    @property
    def naive_dir(self) -> Path:
        return self.workdir / "naive"

    # --- starting -----------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        # Logs and records are their owner's only, like everything under var/.
        log = os.open(self.logs / f"{name}.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            return subprocess.Popen(  # noqa: S603 - our own interpreter and modules
                argv,
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Its own group: a kill takes RQ's scheduler (a forked child) along.
                start_new_session=True,
                umask=0o077,
            )
        finally:
            os.close(log)

    def start(self) -> None:
        for directory in (self.workdir, self.logs, self.naive_dir):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        world = self.plan.world
        web_port = _free_port()
        secret = "whsec_" + secrets.token_hex(24)
        base = {k: v for k, v in os.environ.items() if k in SANDBOX_ENVIRONMENT}
        urls: dict[str, str] = {}
        for name in PROVIDERS:
            port = _free_port()
            argv = [sys.executable, "-m", f"sandbox.{name}", "--port", str(port)]
            argv += ["--key-lifetime", f"{world.key_lifetimes[name]:g}"]
            env = dict(base)
            if name == "payments":
                argv += ["--search-lag", f"{world.search_lag:g}"]
                argv += ["--webhook-url", f"http://{HOST}:{web_port}/webhooks/stripe"]
                env["SANDBOX_WEBHOOK_SECRET"] = secret
            self.procs[name] = self._spawn(name, argv, env)
            urls[name] = f"http://{HOST}:{port}"
            self.providers[name] = SandboxClient(urls[name], timeout=10.0)
        for name, client in self.providers.items():
            self._wait(name, client.health)
        self.providers["payments"].config(**world.webhook)
        self.providers["bookings"].config(
            full_hotels=self.plan.full_hotels, hold_expiry=world.hold_expiry
        )
        self.env = self._app_env(urls, secret)
        web = [sys.executable, "-m", "gunicorn", "--config", "python:agentops.gunicorn_conf"]
        web += ["--bind", f"{HOST}:{web_port}"]
        self.procs["web"] = self._spawn("web", web, {**self.env, "WEB_CONCURRENCY": "1"})
        self._wait("web", lambda: _accepts(web_port))
        if self.harness == "safe":
            sweep = [sys.executable, "manage.py", "sweep"]
            sweep += ["--interval", f"{world.sweep_interval:g}"]
            self.procs["sweeper"] = self._spawn("sweeper", sweep, self.env)
        self.slots = [Slot(i) for i in range(self.workers)]
        for slot in self.slots:
            self._start_worker(slot)

    def _app_env(self, urls: dict[str, str], secret: str) -> dict[str, str]:
        env = {
            **os.environ,
            **self.plan.world.env(),
            # Production settings, whatever this process runs with (the tests' included).
            "DJANGO_SETTINGS_MODULE": "agentops.settings",
            "DJANGO_DEBUG": "0",
            "DJANGO_HTTPS": "0",
            "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY", "")
            or secrets.token_urlsafe(50),
            "DATABASE_URL": database_url(),
            "REDIS_URL": str(settings.REDIS_URL),
            "STRIPE_API_KEY": "sk_test_agentops_chaos",
            "STRIPE_API_BASE": urls["payments"],
            "STRIPE_WEBHOOK_SECRET": secret,
            "MAIL_API_BASE": urls["mail"],
            "BOOKINGS_API_BASE": urls["bookings"],
            "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
        }
        if len(env["DJANGO_SECRET_KEY"]) < 50:
            env["DJANGO_SECRET_KEY"] = secrets.token_urlsafe(50)
        # The app's role only, as in production; and no fault armed unless the run arms it.
        for name in ("DATABASE_OWNER_URL", "AGENTOPS_CHAOS_KILL", CONTROL_VARIABLE):
            env.pop(name, None)
        return env

    def _start_worker(self, slot: Slot) -> None:
        env = dict(self.env)
        argv = [sys.executable, "manage.py", *WORKER_ARGS]
        if self.harness == "naive":
            argv += ["--worker-class", NAIVE_WORKER_CLASS]
            env["AGENTOPS_CHAOS_NAIVE_DIR"] = str(self.naive_dir)
        slot.armed, slot.arm_next, slot.killed = slot.arm_next, "", False
        if slot.armed:
            env["AGENTOPS_CHAOS_KILL"] = slot.armed
        slot.proc = self._spawn(f"worker-{slot.index}", argv, env)
        self.started_workers += 1

    def _wait(self, name: str, ready: Any) -> None:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not ready():
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is not None:
                raise WorldError(f"{name} exited with {proc.returncode}; see {self.logs}")
            if time.monotonic() > deadline:
                raise WorldError(f"{name} was not ready in {STARTUP_SECONDS:g}s; see {self.logs}")
            time.sleep(0.05)

    def admin(self, provider: str, action: Callable[[SandboxClient], T]) -> T:
        """Ask a provider's admin API, waiting out a "down" the run itself caused (its
        listening socket is closed for a few seconds)."""
        client = self.providers[provider]
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            try:
                return action(client)
            except OSError:  # URLError included: refused while it is down
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    # --- keeping it running ---------------------------------------------------------------

    def supervise(self) -> list[Death]:
        """Start again every worker that died (as ``make run``'s supervisor does); resume
        stopped ones whose time came. Returns the deaths seen."""
        deaths = []
        now = time.time()
        for slot in self.slots:
            if slot.stopped_until is not None and now >= slot.stopped_until:
                self._signal(slot, signal.SIGCONT)
                slot.stopped_until = None
            proc = slot.proc
            if proc is None or proc.poll() is None:
                continue
            code = proc.returncode
            deaths.append(Death(slot.index, proc.pid, code, now, slot.armed, slot.killed))
            self._signal(slot, signal.SIGKILL)  # what it left in its group
            self._start_worker(slot)
        return deaths

    def _signal(self, slot: Slot, signum: int) -> None:
        if slot.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(slot.proc.pid, signum)

    def _slot(self, pick: int) -> Slot:
        running = [s for s in self.slots if s.stopped_until is None] or self.slots
        return running[pick % len(running)]

    def worker_kill(self, *, pick: int, arm_next: str = "") -> int:
        """SIGKILL a worker's whole group now; its replacement is armed with ``arm_next``.
        Returns the pid killed."""
        slot = self._slot(pick)
        assert slot.proc is not None  # noqa: S101 - every slot is started
        slot.arm_next, slot.killed = arm_next, True
        if slot.stopped_until is not None:
            slot.stopped_until = None
        self._signal(slot, signal.SIGKILL)
        return slot.proc.pid

    def worker_stop(self, *, pick: int, seconds: float) -> int:
        """SIGSTOP a worker (and its scheduler) for ``seconds``; returns its pid."""
        slot = self._slot(pick)
        assert slot.proc is not None  # noqa: S101
        slot.stopped_until = time.time() + seconds
        self._signal(slot, signal.SIGSTOP)
        return slot.proc.pid

    # --- ending ---------------------------------------------------------------------------

    def stop_workers(self) -> None:
        """Stop everything that acts on the journal (workers, sweeper), so the audit reads a
        world that no longer moves; the providers and the web app stay up."""
        for slot in self.slots:
            self._signal(slot, signal.SIGCONT)
            slot.stopped_until = None
            self._signal(slot, signal.SIGKILL)
        sweeper = self.procs.pop("sweeper", None)
        if sweeper is not None:
            _end(sweeper)
        for slot in self.slots:
            if slot.proc is not None:
                slot.proc.wait(timeout=30)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop_workers()
        for proc in self.procs.values():
            _end(proc)
        self.procs.clear()


def _end(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def world_running(*, plan: Plan, harness: str, workers: int, workdir: Path) -> Iterator[World]:
    world = World(plan=plan, harness=harness, workers=workers, workdir=workdir)
    try:
        world.start()
        yield world
    finally:
        world.close()
