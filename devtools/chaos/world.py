"""The processes of a chaos run, and the faults done to them.

The run starts its own world: the three sandbox providers (fresh ledgers, its faults), the
web app that receives the payment provider's webhooks (gunicorn, as ``make run`` serves
it), RQ workers (whose tasks the run's model decides: devtools.chaos.model) and, for the
safe and mcp harnesses, the sweeper; for the mcp harness, the MCP server too (``manage.py
mcp_server --transport http`` on loopback, as production serves it, behind API clients'
tokens with the ``mcp`` scope) — real processes, each in its own process group, against the
run's PostgreSQL and Redis. It supervises the workers and the MCP server as ``make run``
does (one that dies is started again) and breaks things on cue: a worker killed or stopped,
the MCP server killed, a provider down. PostgreSQL and Redis belong to whoever started them:
the launcher restarts them when asked through its control socket (devtools.stack.control);
without one, those faults are skipped and said so. Processes are started, watched and
stopped by devtools.process, as the launcher's are.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from django.conf import settings

from agentops.workers import WORKER_ARGS
from devtools.chaos.kill import KILL_VARIABLE, armed
from devtools.chaos.model import MODEL_VARIABLE
from devtools.chaos.model import WRAPPER as MODEL_WRAPPER
from devtools.chaos.naive import NAIVE_DIR_VARIABLE
from devtools.chaos.plan import Plan
from devtools.database import database_url
from devtools.process import (
    HOST,
    Popen,
    ProcessError,
    Supervised,
    accepts_tcp,
    end,
    free_port,
    signal_group,
    spawn,
    wait_until,
)
from devtools.sandboxes import SandboxHandle, sandbox_spawn, sandboxes_ready, sandboxes_stop
from devtools.stack.control import CONTROL_VARIABLE
from sandbox.client import SandboxClient

STARTUP_SECONDS = 30.0
PROVIDERS = ("payments", "mail", "bookings")
NAIVE_WORKER_CLASS = "devtools.chaos.naive.NaiveWorker"


T = TypeVar("T")


class WorldError(ProcessError):
    """The world could not be set up; the message says what and where to look."""


@dataclass
class Slot:
    """One worker position: the process in it now, and what the next one is started with."""

    index: int
    supervised: Supervised | None = None
    armed: str = ""
    """The AGENTOPS_CHAOS_KILL the process in it was started with."""
    arm_next: str = ""
    killed: bool = False
    """Its process was killed by the run (not a death of its own)."""
    stopped_until: float | None = None

    @property
    def proc(self) -> Popen | None:
        return self.supervised.proc if self.supervised is not None else None


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
    procs: dict[str, Popen] = field(default_factory=dict)
    sandboxes: list[SandboxHandle] = field(default_factory=list)
    slots: list[Slot] = field(default_factory=list)
    providers: dict[str, SandboxClient] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    started_workers: int = 0
    mcp: Supervised | None = None
    """The MCP server (the mcp harness only)."""
    mcp_port: int = 0
    mcp_starts: int = 0
    cluster: bool = False
    """PostgreSQL is a Patroni cluster (devtools.chaos.cluster): two sweepers run, as on two
    hosts, and the workers can be deployed anew (:meth:`deploy`)."""
    version: int = 1
    """The version the workers run (``AGENTOPS_VERSION``): a rolling deploy moves it on."""
    deploying: list[Slot] = field(default_factory=list)
    _deploy_pid: int | None = None

    @property
    def logs(self) -> Path:
        return self.workdir / "logs"

    @property
    def naive_dir(self) -> Path:
        return self.workdir / "naive"

    # --- starting -----------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> Popen:
        # Logs and records are their owner's only, like everything under var/.
        return spawn(argv, env=env, output=self.logs / f"{name}.log")

    def start(self) -> None:
        for directory in (self.workdir, self.logs, self.naive_dir):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        world = self.plan.world
        web_port = free_port()
        secret = "whsec_" + secrets.token_hex(24)
        for name in PROVIDERS:
            args = ["--key-lifetime", f"{world.key_lifetimes[name]:g}"]
            env = {}
            if name == "payments":
                args += ["--search-lag", f"{world.search_lag:g}"]
                args += ["--webhook-url", f"http://{HOST}:{web_port}/webhooks/stripe"]
                env["SANDBOX_WEBHOOK_SECRET"] = secret
            handle = sandbox_spawn(
                name, *args, env=env, output=self.logs / f"{name}.log", client_timeout=10.0
            )
            self.sandboxes.append(handle)
            self.providers[name] = handle.client
        self._ready(lambda: sandboxes_ready(*self.sandboxes, timeout=STARTUP_SECONDS))
        self.providers["payments"].config(**world.webhook)
        self.providers["bookings"].config(
            full_hotels=self.plan.full_hotels, hold_expiry=world.hold_expiry
        )
        self.env = self._app_env({h.name: h.url for h in self.sandboxes}, secret)
        web = [sys.executable, "-m", "gunicorn", "--config", "python:agentops.gunicorn_conf"]
        web += ["--bind", f"{HOST}:{web_port}"]
        web_env = {**self.env, "DATABASE_URL": database_url("web"), "WEB_CONCURRENCY": "1"}
        proc = self.procs["web"] = self._spawn("web", web, web_env)
        self._ready(
            lambda: wait_until(
                lambda: accepts_tcp(web_port, timeout=0.5),
                what="the web app",
                timeout=STARTUP_SECONDS,
                proc=proc,
            )
        )
        if self.harness == "mcp":
            self.mcp_port = free_port()
            self.mcp = Supervised("mcp-server", self._start_mcp, pauses=(0.0, 0.0))
            proc = self.mcp.start()
            self._ready(lambda: self.mcp_wait_ready(proc))
        if self.harness in ("safe", "mcp"):
            sweep = [sys.executable, "manage.py", "sweep"]
            sweep += ["--interval", f"{world.sweep_interval:g}"]
            sweeper_env = {**self.env, "DATABASE_URL": database_url("worker")}
            self.procs["sweeper"] = self._spawn("sweeper", sweep, sweeper_env)
            if self.cluster:  # one per host, as deploy/README.md runs them: not a singleton
                self.procs["sweeper-2"] = self._spawn("sweeper-2", sweep, sweeper_env)
        self.slots = [Slot(i) for i in range(self.workers)]
        for slot in self.slots:
            # A dead worker is started again at once: the run's faults are what it measures.
            slot.supervised = Supervised(
                f"worker-{slot.index}",
                functools.partial(self._start_worker, slot),
                pauses=(0.0, 0.0),
            )
            slot.supervised.start()

    def _ready(self, wait: Callable[[], None]) -> None:
        try:
            wait()
        except ProcessError as error:
            raise WorldError(f"{error}; see {self.logs}") from None

    def _app_env(self, urls: dict[str, str], secret: str) -> dict[str, str]:
        env = {
            **os.environ,
            **self.plan.world.env(self.harness),
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
            "AGENTOPS_VERSION": f"chaos-{self.version}",
        }
        if len(env["DJANGO_SECRET_KEY"]) < 50:
            env["DJANGO_SECRET_KEY"] = secrets.token_urlsafe(50)
        # The app's roles only (each process its kind's, below), as in production; no
        # development tools (no `manage.py chaos` in the app, no tool wrapper) and no fault
        # armed unless the run arms it.
        for name in (
            "DATABASE_OWNER_URL",
            CONTROL_VARIABLE,
            "AGENTOPS_DEVTOOLS",
            "AGENTOPS_TOOL_WRAPPERS",
            "AGENTOPS_PLANNER_WRAPPERS",
            KILL_VARIABLE,
            MODEL_VARIABLE,
            NAIVE_DIR_VARIABLE,
        ):
            env.pop(name, None)
        return env

    def _start_worker(self, slot: Slot) -> Popen:
        # The safe and naive harnesses' tasks are decided by the run's model: the naive loop
        # asks it itself; the safe harness's runner through its planner wrapper. The mcp
        # harness's model is its agent, outside (devtools.chaos.agent): the tasks its intents
        # start follow their kinds' playbooks, as they do in production.
        env = {**self.env, "DATABASE_URL": database_url("worker")}
        argv = [sys.executable, "manage.py", *WORKER_ARGS]
        if self.harness == "naive":
            argv += ["--worker-class", NAIVE_WORKER_CLASS]
            env.update(self.plan.model.env())
            env[NAIVE_DIR_VARIABLE] = str(self.naive_dir)
        elif self.harness == "safe":
            env.update(self.plan.model.env())
            env["AGENTOPS_PLANNER_WRAPPERS"] = MODEL_WRAPPER
        slot.armed, slot.arm_next, slot.killed = slot.arm_next, "", False
        if slot.armed:
            env.update(armed(slot.armed))
        env["AGENTOPS_VERSION"] = f"chaos-{self.version}"
        self.started_workers += 1
        return self._spawn(f"worker-{slot.index}", argv, env)

    def invoices_seed(self, invoices: list[dict[str, Any]]) -> None:
        """Put the invoices the run's intents name into the payments provider's record (its
        Invoices API: what ``look_up_invoice`` reads amounts and addresses from)."""
        for fields in invoices:
            self.admin("payments", lambda c, f=fields: c.invoice(**f))  # type: ignore[misc]

    def _start_mcp(self) -> Popen:
        """The MCP server as production runs it: streamable HTTP on loopback, every request
        with an API client's token (the run's agents have theirs), the app's settings."""
        argv = [sys.executable, "manage.py", "mcp_server", "--transport", "http"]
        argv += ["--host", HOST, "--port", str(self.mcp_port)]
        self.mcp_starts += 1
        return self._spawn("mcp-server", argv, {**self.env, "DATABASE_URL": database_url("web")})

    def mcp_wait_ready(self, proc: Popen | None = None) -> None:
        wait_until(
            lambda: accepts_tcp(self.mcp_port, timeout=0.5),
            what="the MCP server",
            timeout=STARTUP_SECONDS,
            proc=proc,
        )

    @property
    def mcp_url(self) -> str:
        return f"http://{HOST}:{self.mcp_port}/mcp"

    def mcp_kill(self) -> int:
        """SIGKILL the MCP server's group now, calls in flight and all; :meth:`supervise`
        starts it again at once. Returns the pid killed."""
        assert self.mcp is not None and self.mcp.proc is not None  # noqa: S101 - mcp harness
        signal_group(self.mcp.proc, signal.SIGKILL)
        return self.mcp.proc.pid

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
            assert slot.supervised is not None  # noqa: S101 - every slot is started
            armed_with, killed = slot.armed, slot.killed  # the replacement resets them
            dead = slot.supervised.check()
            if dead is not None:
                deaths.append(Death(slot.index, dead.pid, dead.returncode, now, armed_with, killed))
        if self.mcp is not None:
            self.mcp.check()
        return deaths

    def _signal(self, slot: Slot, signum: int) -> None:
        if slot.proc is not None:
            signal_group(slot.proc, signum)

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

    def deploy(self) -> int:
        """A rolling deploy of the workers: the next version from now on. Each worker in turn
        is stopped warm (SIGTERM: RQ finishes the job in hand, then exits) and, once its
        replacement runs the new version, the next (:meth:`deploy_go_on`, each tick), so that
        the others run meanwhile. Returns the version deployed."""
        self.version += 1
        self.deploying = list(self.slots)
        self._deploy_pid = None
        self.deploy_go_on()
        return self.version

    def deploy_go_on(self) -> None:
        """The rolling deploy's next move: stop the next worker, or wait for its replacement."""
        while self.deploying:
            slot = self.deploying[0]
            proc = slot.proc
            if self._deploy_pid is None:
                if proc is None or proc.poll() is not None:
                    self.deploying.pop(0)  # dead already: it starts again as the new version
                    continue
                slot.killed = True  # a death the run caused, not one of its own
                if slot.stopped_until is not None:
                    self._signal(slot, signal.SIGCONT)
                    slot.stopped_until = None
                os.kill(proc.pid, signal.SIGTERM)  # the worker alone: its warm shutdown
                self._deploy_pid = proc.pid
                return
            if proc is not None and proc.pid != self._deploy_pid and proc.poll() is None:
                self.deploying.pop(0)  # its replacement runs the new version: the next
                self._deploy_pid = None
                continue
            return

    # --- ending ---------------------------------------------------------------------------

    def stop_workers(self) -> None:
        """Stop everything that acts on the journal (the MCP server, workers, sweeper), so the
        audit reads a world that no longer moves; the providers and the web app stay up."""
        if self.mcp is not None and self.mcp.proc is not None:
            end(self.mcp.proc)
            self.mcp = None
        for slot in self.slots:
            self._signal(slot, signal.SIGCONT)
            slot.stopped_until = None
        end(*(s.proc for s in self.slots if s.proc is not None), signum=signal.SIGKILL)
        for name in ("sweeper", "sweeper-2"):
            sweeper = self.procs.pop(name, None)
            if sweeper is not None:
                end(sweeper)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop_workers()
        end(*self.procs.values())
        self.procs.clear()
        sandboxes_stop(*self.sandboxes, timeout=10.0)
        self.sandboxes.clear()


@contextlib.contextmanager
def world_running(
    *, plan: Plan, harness: str, workers: int, workdir: Path, cluster: bool = False
) -> Iterator[World]:
    world = World(plan=plan, harness=harness, workers=workers, workdir=workdir, cluster=cluster)
    try:
        world.start()
        yield world
    finally:
        world.close()
