"""The chaos run: the service ``manage.py chaos`` calls (README, "Proof: the chaos run").

It starts the run's world (devtools.chaos.world), starts the plan's tasks at their moments
(for the mcp harness, hands each to its agent, which asks agentops' MCP server for it:
devtools.chaos.agent), does the plan's faults at theirs, acts as the operator who approves
(or rejects) held trips, clears the provider faults when the fault window ends, lets
reconciliation run to its deadline, stops the workers, and audits the journal (or the naive
loop's records; for the mcp harness, the journal and every answer its agent was given)
against the providers' ledgers (devtools.chaos.audit).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO, TypeVar

import django_rq
import stripe
from django.db import InterfaceError, OperationalError, connections
from django.db.models import Count
from django.db.models.functions import Now
from django.test import override_settings
from rq.worker import Worker

from agentops.api.auth import api_client_create
from agentops.runner import task_approve, task_reject, task_start
from devtools.chaos.agent import CLIENTS, Agent, AgentModel, asks_of, invoices_of
from devtools.chaos.audit import Hit, audit_journal, audit_mcp, audit_naive, duplicates_figures
from devtools.chaos.ledgers import Ledgers, faults_counted
from devtools.chaos.naive import (
    NAIVE_JOB,
    approval_path,
    decision_path,
    read_json,
    record_path,
    started_path,
    write_whole,
)
from devtools.chaos.plan import Event, Plan, TaskSpec, plan_make
from devtools.chaos.report import MUST_BE_ZERO, verdict
from devtools.chaos.world import World, world_running
from devtools.process import REPO
from devtools.stack.control import restartable_servers, stack_control
from journal.models import Approval, ApprovalState, Entry, EntryKind, Task, TaskStatus
from journal.status import ADVANCING, FINAL

HARNESSES = ("safe", "naive", "mcp")
OPERATOR = "chaos-operator"
TICK = 0.2
STILL_MOVING = 15.0
"""Past its deadline, a run goes on while tasks still change state this recently."""
NAIVE_SETTLE = 30.0
__all__ = ["HARNESSES", "MUST_BE_ZERO", "ChaosRefused", "chaos_run"]

T = TypeVar("T")
DATABASE_ERRORS = (OperationalError, InterfaceError)


class ChaosRefused(Exception):
    """The run cannot start as asked; nothing was started."""


def _queue_to_itself() -> None:
    """Refuse to share the queue: another worker (``make run``'s, say) would take the run's
    tasks and act on them against other providers, and the audit would find effects missing."""
    queue = django_rq.get_queue("default")
    workers = Worker.all(queue=queue)
    if workers:
        names = ", ".join(sorted(w.name for w in workers)[:3])
        raise ChaosRefused(
            f"{len(workers)} RQ worker(s) already listen on the queue {queue.name!r} ({names}): "
            "they would run this run's tasks against other providers. Stop them (make run's "
            "worker, for one), or give the run a Redis of its own (REDIS_URL, or make chaos)"
        )


def mcp_clients(run: str) -> list[str]:
    """The names of the API clients the mcp harness's agent calls as (one token each)."""
    return [f"chaos-{run}-{letter}" for letter in CLIENTS]


def _db(action: Callable[[], T], otherwise: T) -> T:
    """Run a query of the driver's own; while the database is away (the run restarts it),
    say ``otherwise`` and reconnect next time."""
    try:
        return action()
    except DATABASE_ERRORS:
        connections.close_all()
        return otherwise


@dataclass
class Bar:
    """A progress bar on a terminal; a line every few seconds anywhere else (a CI log)."""

    out: TextIO | None
    label: str
    every: float = 10.0
    last: float = 0.0
    drawn: bool = False

    def show(self, done: int, total: int, note: str, *, force: bool = False) -> None:
        if self.out is None:
            return
        tty = self.out.isatty()
        now = time.monotonic()
        if not force and now - self.last < (0.5 if tty else self.every):
            return
        self.last = now
        width = 24
        filled = int(width * done / max(1, total))
        line = f"{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {note}"
        if tty:
            self.out.write("\r" + line.ljust(110)[:140])
            self.drawn = True
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def close(self) -> None:
        if self.out is not None and self.drawn:
            self.out.write("\n")
            self.out.flush()


@dataclass
class Driver:
    plan: Plan
    harness: str
    world: World
    servers: set[str]
    started: float = field(default_factory=time.time)
    task_ids: dict[int, str] = field(default_factory=dict)
    fired: int = 0
    process_faults: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    hits: list[Hit] = field(default_factory=list)
    approvals: Counter[str] = field(default_factory=Counter)
    deaths: list[dict[str, Any]] = field(default_factory=list)
    calm: bool = False
    host: str = field(default_factory=socket.gethostname)
    agent: Agent | None = None
    """The mcp harness's agent: it asks for each task's intents over MCP."""
    mcp_tasks: dict[str, None] = field(default_factory=dict)
    """The tasks the mcp harness's intents started (found in the journal), in order."""
    mcp_kills: list[float] = field(default_factory=list)

    @property
    def ids(self) -> list[str]:
        if self.harness == "mcp":
            return list(self.mcp_tasks)
        return [t for t in self.task_ids.values() if t]

    @property
    def total(self) -> int:
        """What the run waits for: a task of the plan each; for the mcp harness, each
        conversation (a trip has no intent, and is not offered over MCP)."""
        if self.harness == "mcp":
            return sum(1 for s in self.plan.tasks if asks_of(s))
        return len(self.plan.tasks)

    def mcp_tasks_find(self) -> None:
        """The tasks the MCP server has started for the run's clients, in order. Read whole
        each time: an entry's id is taken when it is written, not when it commits, so an
        intent's task written before another and committed after it has the lower id, and a
        "since the last id seen" query would never find it (seed 3 lost one that way)."""
        actors = [f"mcp:{name}" for name in mcp_clients(self.plan.run)]
        rows: list[uuid.UUID] = _db(
            lambda: list(
                Entry.objects.filter(kind=EntryKind.TASK_CREATED, actor__in=actors)
                .order_by("pk")
                .values_list("task_id", flat=True)
            ),
            [],
        )
        for task_id in rows:
            self.mcp_tasks.setdefault(str(task_id), None)

    def name(self, spec: TaskSpec) -> str:
        return f"{self.plan.run}-{spec.n}"

    # --- tasks --------------------------------------------------------------------------

    def submit_due(self, elapsed: float) -> None:
        for spec in self.plan.tasks:
            if spec.n in self.task_ids or self.plan.submit_at(spec) > elapsed:
                continue
            started = self._submit(spec)
            if started is None:
                return  # the world is down for now: try again next tick, in order
            self.task_ids[spec.n] = started

    def _submit(self, spec: TaskSpec) -> str | None:
        if self.harness == "mcp":
            assert self.agent is not None  # noqa: S101 - started with the mcp harness
            # Its agent asks for the task's intents; a trip has none ("": not offered).
            return self.name(spec) if self.agent.converse(spec) else ""
        if self.harness == "naive":
            body = {"task": self.name(spec), "kind": spec.kind, "refs": spec.refs}
            try:
                django_rq.get_queue("default").enqueue(
                    NAIVE_JOB, json.dumps(body), job_timeout=120, result_ttl=600
                )
            except Exception:  # Redis is being restarted: again next tick
                return None
            return self.name(spec)
        goal = f"{spec.goal} (chaos {self.plan.run} #{spec.n})"
        try:
            return str(task_start(kind=spec.kind, goal=goal, refs=spec.refs, actor=OPERATOR).pk)
        except Exception:
            # Recorded, and then the ring failed (Redis away: the sweeper rings it); or the
            # database went away around the commit. Which one, the database says.
            connections.close_all()
            found = _db(
                lambda: Task.objects.filter(goal=goal).values_list("pk", flat=True).first(), None
            )
            return str(found) if found is not None else None

    def decide_approvals(self) -> None:
        """The operator: approve or reject each held trip, as the plan says (both harnesses
        hold the same calls: agentops.kinds.KindRules.hold; the mcp harness's renewals and
        reminders hold none)."""
        if self.harness == "naive":
            self._decide_naive_approvals()
            return
        if self.harness == "mcp":
            return
        pending: list[tuple[int, uuid.UUID, str]] = _db(
            lambda: list(
                Approval.objects.filter(
                    task_id__in=self.ids, state=ApprovalState.PENDING
                ).values_list("pk", "task_id", "digest")
            ),
            [],
        )
        decisions = {
            self.task_ids[s.n]: s.decision for s in self.plan.tasks if s.n in self.task_ids
        }
        for approval, task_id, digest in pending:
            decision = decisions.get(str(task_id)) or "approve"
            try:
                if decision == "approve":
                    task_approve(
                        task_id=task_id, approval_id=approval, digest=digest, actor=OPERATOR
                    )
                else:
                    task_reject(
                        task_id=task_id,
                        approval_id=approval,
                        actor=OPERATOR,
                        reason="rejected by the chaos run's operator, as its plan says",
                    )
                self.approvals[{"approve": "approved", "reject": "rejected"}[decision]] += 1
            except Exception:  # decided meanwhile, or the world is down: look again
                connections.close_all()

    def _decide_naive_approvals(self) -> None:
        decisions = {self.name(s): s.decision or "approve" for s in self.plan.tasks}
        directory = self.world.naive_dir
        for name in self.ids:
            request = read_json(approval_path(directory, name))
            if request is None:
                continue
            answered = read_json(decision_path(directory, name))
            if answered is not None and answered.get("n") == request.get("n"):
                continue
            decision = decisions.get(name, "approve")
            write_whole(decision_path(directory, name), {"n": request["n"], "decision": decision})
            self.approvals[{"approve": "approved", "reject": "rejected"}[decision]] += 1

    # --- faults -------------------------------------------------------------------------

    def arm_providers(self) -> None:
        for rule in self.plan.rules:
            self.world.providers[rule.provider].fault(
                rule.operation,
                rule.fault,
                probability=rule.probability,
                seed=rule.seed,
                times=rule.times,
                delay=rule.delay,
            )

    def calm_providers(self) -> None:
        """The fault window is over: providers stop failing and webhooks arrive once."""
        for name in self.world.providers:
            self.world.admin(name, lambda c: c.clear_faults())
        self.world.admin(
            "payments",
            lambda c: c.config(
                webhook_delay=0.0, webhook_duplicate=0.0, webhook_loss=0.0, webhook_reorder=False
            ),
        )
        self.calm = True

    def fire_due(self, elapsed: float) -> None:
        while self.fired < len(self.plan.events) and self.plan.events[self.fired].at <= elapsed:
            self._fire(self.plan.events[self.fired])
            self.fired += 1

    def _fire(self, event: Event) -> None:
        at = time.time()
        if event.kind in ("worker_sigkill", "worker_sigstop"):
            if event.kind == "worker_sigkill":
                pid = self.world.worker_kill(pick=event.pick, arm_next=event.target)
            else:
                pid = self.world.worker_stop(pick=event.pick, seconds=event.duration)
            # Its lease outlives it (that is the point): the tasks it held are still its.
            struck = self._held_by(pid, at)
            self.hits += [Hit(event.kind, at, task, due) for task, due in struck]
        elif event.kind in ("redis_restart", "postgres_restart"):
            server = event.kind.split("_")[0]
            if server not in self.servers:
                self.skipped[event.kind] += 1
                return
            # The naive harness keeps nothing in PostgreSQL: a restart does not touch it.
            naive_pg = self.harness == "naive" and server == "postgres"
            struck = [] if naive_pg else self._waiting_on_a_doorbell(at)
            answer = stack_control(f"restart {server}") or {}
            if not answer.get("ok"):
                self.skipped[event.kind] += 1
                return
            if server == "postgres":
                connections.close_all()
            self.hits += [Hit(event.kind, at, task, due) for task, due in struck]
        elif event.kind == "provider_down":
            self.world.admin(event.target, lambda c: c.fault("*", "down", delay=event.duration))
        elif event.kind == "mcp_server_kill":
            if self.harness != "mcp":
                return  # no MCP server in this harness's world: not a fault it meets
            self.world.mcp_kill()
            self.mcp_kills.append(at)
        if event.kind != "provider_down":  # the provider logs its own
            self.process_faults[event.kind] += 1

    def _held_by(self, pid: int, at: float) -> list[tuple[str, float]]:
        """The tasks a worker process is advancing now (they wait on it)."""
        if self.harness == "naive":
            return [(name, at) for name in self._naive_running(pid)]
        owner = f"{self.host}:{pid}"
        held: list[uuid.UUID] = _db(
            lambda: list(
                Task.objects.filter(
                    pk__in=self.ids, lease_owner=owner, lease_expires_at__gt=Now()
                ).values_list("pk", flat=True)
            ),
            [],
        )
        return [(str(pk), at) for pk in held]

    def _waiting_on_a_doorbell(self, at: float) -> list[tuple[str, float]]:
        """Tasks that are advancing (their rings live in Redis; their runs need PostgreSQL),
        each with when it would move at the earliest."""
        if self.harness == "naive":
            # Its queued jobs live in Redis alone.
            naive = self.world.naive_dir
            return [(n, at) for n in self.ids if not started_path(naive, n).exists()]
        rows: list[tuple[uuid.UUID, datetime | None]] = _db(
            lambda: list(
                Task.objects.filter(pk__in=self.ids, status__in=ADVANCING).values_list(
                    "pk", "wake_at"
                )
            ),
            [],
        )
        return [(str(pk), max(at, wake.timestamp()) if wake else at) for pk, wake in rows]

    def _naive_running(self, pid: int) -> list[str]:
        running = []
        for name in self.ids:
            marker = started_path(self.world.naive_dir, name)
            if not marker.exists() or record_path(self.world.naive_dir, name).exists():
                continue
            try:
                if json.loads(marker.read_text()).get("pid") == pid:
                    running.append(name)
            except ValueError:
                continue
        return running

    def tend_workers(self) -> None:
        for death in self.world.supervise():
            self.deaths.append(asdict(death))
            if death.armed and not death.killed:
                point = death.armed.split(":")[0]
                self.process_faults[f"worker_killed_{point}"] += 1
                struck = self._held_by(death.pid, death.at)
                self.hits += [Hit(f"worker_killed_{point}", death.at, t, d) for t, d in struck]

    # --- watching -----------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        if self.harness == "mcp":
            return self._mcp_counts()
        if self.harness == "naive":
            over = sum(record_path(self.world.naive_dir, n).exists() for n in self.ids)
            return {"over": over, "running": len(self.ids) - over}
        rows = _db(
            lambda: list(
                Task.objects.filter(pk__in=self.ids)
                .values_list("status")
                .annotate(n=Count("pk"))
                .order_by()
            ),
            None,
        )
        if rows is None:
            return {}
        by = dict(rows)
        try:
            queued = django_rq.get_queue("default").count
        except Exception:  # Redis restarting
            queued = -1
        return {
            "queued": queued,
            "over": sum(by.get(s, 0) for s in FINAL),
            "human": by.get(TaskStatus.NEEDS_HUMAN, 0),
            "waiting": by.get(TaskStatus.WAITING, 0),
            "held": by.get(TaskStatus.AWAITING_APPROVAL, 0),
            "running": by.get(TaskStatus.RUNNABLE, 0),
        }

    def _mcp_counts(self) -> dict[str, int]:
        """Conversations over and still talking, and the intents' tasks still open."""
        assert self.agent is not None  # noqa: S101 - the mcp harness has one
        self.mcp_tasks_find()
        rows = _db(
            lambda: list(
                Task.objects.filter(pk__in=self.ids)
                .values_list("status")
                .annotate(n=Count("pk"))
                .order_by()
            ),
            None,
        )
        if rows is None:
            return {}
        by = dict(rows)
        ended = self.agent.ended()
        return {
            "over": ended,
            "talking": len(self.agent.conversations) - ended,
            "calls": len(self.agent.in_flight()),
            "open": sum(n for s, n in by.items() if s not in (*FINAL, TaskStatus.NEEDS_HUMAN)),
            "human": by.get(TaskStatus.NEEDS_HUMAN, 0),
        }


def chaos_run(
    *,
    tasks: int = 300,
    seed: int = 1,
    harness: str = "safe",
    workers: int = 3,
    workdir: Path | None = None,
    out: TextIO | None = sys.stderr,
    time_limit: float = 540.0,
    refusals: int = 0,
) -> dict[str, Any]:
    """Run the chaos run and return its figures (see devtools.chaos.audit); ``ok`` is true
    only when devtools.chaos.report.verdict finds no reason to fail it (``failed``: the
    reasons). ``refusals``: charges the payment provider refuses us for on purpose, each
    leaving its task to a person (devtools.chaos.plan)."""
    if harness not in HARNESSES:
        raise ValueError(f"harness: {harness!r} is not one of {', '.join(HARNESSES)}")
    _queue_to_itself()
    began = time.monotonic()
    run = f"s{seed}-{uuid.uuid4().hex[:6]}"
    plan = plan_make(seed=seed, tasks=tasks, run=run, refusals=refusals)
    workdir = workdir or REPO / "var" / "chaos" / run
    servers = restartable_servers()
    bar = Bar(out, f"chaos seed {seed} {harness}")
    with (
        override_settings(**plan.world.driver_settings()),
        world_running(plan=plan, harness=harness, workers=workers, workdir=workdir) as world,
    ):
        driver = Driver(plan=plan, harness=harness, world=world, servers=servers)
        if harness == "mcp":
            driver.agent = _agent_start(plan, world)
        try:
            driver.arm_providers()
            _drive(driver, bar, time_limit=time_limit, began=began)
        finally:
            if driver.agent is not None:
                driver.agent.stop()
        if not driver.calm:  # every task was over before the fault window closed
            driver.calm_providers()
        world.stop_workers()
        if harness == "mcp":
            driver.mcp_tasks_find()
        connections.close_all()
        ledgers = Ledgers(
            entries={name: world.admin(name, lambda c: c.ledger()) for name in world.providers},
            fault_logs={
                name: world.admin(name, lambda c: c.fault_log()) for name in world.providers
            },
            charges=_charges(world),
        )
        names = [driver.task_ids.get(s.n, driver.name(s)) for s in plan.tasks]
        if harness == "safe":
            report = audit_journal(
                plan=plan, task_ids=driver.ids, ledgers=ledgers, hits=driver.hits
            )
        elif harness == "mcp":
            assert driver.agent is not None  # noqa: S101
            report = audit_mcp(
                plan=plan,
                task_ids=driver.ids,
                ledgers=ledgers,
                hits=driver.hits,
                calls=driver.agent.calls,
                conversations=driver.agent.conversations,
                kills=driver.mcp_kills,
            )
        else:
            report = audit_naive(
                plan=plan,
                task_names=names,
                directory=world.naive_dir,
                ledgers=ledgers,
                hits=driver.hits,
            )
        samples = report.pop("recovery_samples")
        details = {
            "recovery": samples,
            "deaths": driver.deaths,
            "slow": _timelines(samples, slower_than=2 * plan.world.lease),
        }
        if driver.agent is not None:
            details["calls"] = [c.as_dict() for c in driver.agent.calls]
        with os.fdopen(
            os.open(workdir / "details.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w"
        ) as kept:
            json.dump(details, kept, indent=1, default=str)
        owners = {task: n for n, task in driver.task_ids.items()}
        if harness == "mcp":
            owners = _mcp_owners(plan, driver.ids)
        doubled = duplicates_figures(
            plan=plan, ledgers=ledgers, owner=lambda key: owners.get(_task_of_key(key))
        )
        examples = doubled.pop("examples")
        report.update(doubled)
        if examples:
            report["examples"]["business_duplicates"] = examples
        unplanned = [d for d in driver.deaths if not d["killed"] and not d["armed"]]
        world_said = plan.world
        report.update(
            faults_injected=faults_counted(ledgers, driver.process_faults),
            faults_skipped=dict(driver.skipped),
            # The standing conditions, which the fault log counts only when they bite.
            world={
                "tool_timeout_s": world_said.tool_timeout,
                "lease_s": world_said.lease,
                "key_lifetimes_s": world_said.key_lifetimes,
                "search_lag_s": world_said.search_lag,
                "webhooks": {k: v for k, v in world_said.webhook.items() if k != "webhook_seed"},
                "full_hotels": len(plan.full_hotels),
                "held_trips": sum(1 for t in plan.tasks if t.held),
                "asked_twice": sum(
                    1 for t in plan.tasks if t.repeats and (harness != "mcp" or asks_of(t))
                ),
                "not_offered": sum(1 for t in plan.tasks if harness == "mcp" and not asks_of(t)),
                "refused_on_purpose": plan.refusals,
                "stripe_max_network_retries": int(
                    world_said.env(harness)["STRIPE_MAX_NETWORK_RETRIES"]
                ),
                "model": _model_said(plan, harness),
            },
            approvals=dict(driver.approvals),
            workers=workers,
            worker_restarts=world.started_workers - workers,
            worker_deaths_unplanned=len(unplanned),
        )
    figures = {
        "seed": seed,
        "harness": harness,
        "code": code_ran(),
        **report,
        "wall_s": round(time.monotonic() - began, 1),
        "workdir": str(workdir),
    }
    figures["failed"] = verdict(figures)
    figures["ok"] = not figures["failed"]
    return figures


def _agent_start(plan: Plan, world: World) -> Agent:
    """The mcp harness: its API clients (tokens with the ``mcp`` scope), the invoices its
    intents name in the payments provider's record, and its agent, talking to the world's MCP
    server."""
    tokens = {}
    for letter, name in zip(CLIENTS, mcp_clients(plan.run), strict=True):
        _, tokens[letter] = api_client_create(name=name, scopes=["mcp"])
    world.invoices_seed(invoices_of(plan.tasks))
    agent = Agent(url=world.mcp_url, tokens=tokens, model=AgentModel(seed=plan.seed), run=plan.run)
    agent.start()
    return agent


def _model_said(plan: Plan, harness: str) -> dict[str, Any]:
    if harness == "mcp":
        model = AgentModel(seed=plan.seed)
        return {"slip_rate": model.rate, "most_per_task": model.most, "agent": "mcp"}
    return {"slip_rate": plan.model.rate, "most_per_task": plan.model.most}


def _mcp_owners(plan: Plan, task_ids: list[str]) -> dict[str, int]:
    """Which task of the plan each intent's task carries (the first to ask for its object):
    the owner of the effects under its keys, for the causes of business duplicates."""
    first: dict[str, int] = {}
    for spec in plan.tasks:
        for ask in asks_of(spec):
            first.setdefault(ask.object.casefold(), spec.n)
    owners = {}
    rows: list[tuple[uuid.UUID, str, Any]] = _db(
        lambda: list(Task.objects.filter(pk__in=task_ids).values_list("pk", "kind", "refs")), []
    )
    for pk, kind, refs in rows:
        if kind == "renewal":
            name = f"charge:{refs.get('invoice')}"
        else:
            row = (refs.get("invoices") or [{}])[0]
            name = f"email:reminder:{row.get('reminder')}:{row.get('invoice')}"
        if name.casefold() in first:
            owners[str(pk)] = first[name.casefold()]
    return owners


def code_ran() -> dict[str, Any]:
    """The code a run ran: the checkout's commit, and whether its files were as committed,
    with nothing untracked beside them (``clean``); None for either when git cannot tell.
    The README's figures must come from a run of the code they describe."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(  # noqa: S603 - git, with our own arguments
                ["git", "-C", str(REPO), *args],  # noqa: S607 - git from the PATH
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

    status = git("status", "--porcelain")
    return {"commit": git("rev-parse", "HEAD"), "clean": None if status is None else not status}


def _drive(driver: Driver, bar: Bar, *, time_limit: float, began: float) -> None:
    """Start the tasks and fire the faults at their moments, tend the workers, act as the
    operator, calm the providers after the fault window, and return once every task is
    over, or once nothing moved for a while past the deadline, or at the time limit."""
    plan, harness = driver.plan, driver.harness
    t0 = time.time()
    settle_by = plan.faults_until + (
        NAIVE_SETTLE if harness == "naive" else plan.world.settle_budget
    )
    last_counts: dict[str, int] = {}
    last_change = time.monotonic()
    over = 0
    while True:
        elapsed = time.time() - t0
        driver.submit_due(elapsed)
        driver.fire_due(elapsed)
        driver.tend_workers()
        driver.decide_approvals()
        if not driver.calm and elapsed >= plan.faults_until:
            driver.calm_providers()
        counts = driver.counts()
        if counts and counts != last_counts:
            last_counts, last_change = counts, time.monotonic()
        all_in = len(driver.task_ids) == len(plan.tasks) and driver.fired == len(plan.events)
        over = counts.get("over", 0)
        if harness != "mcp":  # a conversation is over once told; its tasks must end too
            over += counts.get("human", 0)
        faults = sum(driver.process_faults.values())
        note = " · ".join(f"{v} {k}" for k, v in counts.items() if k != "over" and v)
        bar.show(over, driver.total, f"over · {note} · {faults} process faults · {elapsed:.0f}s")
        if all_in and over == driver.total and not counts.get("open"):
            break
        quiet = time.monotonic() - last_change > STILL_MOVING
        if all_in and elapsed > settle_by and quiet:
            break
        if time.monotonic() - began > time_limit:
            break
        time.sleep(TICK)
    bar.show(over, driver.total, "over; auditing", force=True)
    bar.close()


def _task_of_key(key: str) -> str:
    """The task a provider request's key names: ``ao:<task id>:<n>[:undo]`` (the journal's
    step keys) or ``naive:<run>-<n>:<n>:<attempt>``."""
    parts = key.split(":")
    return parts[1] if len(parts) >= 3 else ""


def _charges(world: World) -> dict[str, str]:
    """Each charge's payment (``ch_…`` → ``pi_…``), from the payments provider's own API
    (calm by now; waiting out a "down" the run caused, as :meth:`World.admin` does)."""
    client = stripe.StripeClient(
        world.env["STRIPE_API_KEY"],
        base_addresses={"api": world.providers["payments"].base_url},
        http_client=stripe.RequestsClient(timeout=30),
        max_network_retries=10,
    )
    intents = client.v1.payment_intents.list(params={"limit": 100})
    return {
        str(intent.latest_charge): str(intent.id)
        for intent in intents.auto_paging_iter()
        if intent.latest_charge
    }


def _timelines(samples: list[dict[str, Any]], *, slower_than: float) -> dict[str, Any]:
    """The journal of each task that took long to move again after a fault, for a person
    looking into why (written beside the run's logs)."""
    slow = {s["task"]: s for s in samples if s["took"] is None or s["took"] > slower_than}
    if not slow:
        return {}
    rows: list[tuple[uuid.UUID, datetime, str, str, Any]] = _db(
        lambda: list(
            Entry.objects.filter(task_id__in=[t for t in slow if _is_uuid(t)])
            .order_by("id")
            .values_list("task_id", "at", "kind", "actor", "data")
        ),
        [],
    )
    out: dict[str, Any] = {t: {"sample": s, "entries": []} for t, s in slow.items()}
    for task_id, at, kind, actor, data in rows:
        out[str(task_id)]["entries"].append([at.timestamp(), kind, actor, data])
    return out


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True
