"""The chaos run as it goes (:class:`Driver`): it starts the plan's tasks at their
moments (for the mcp harness, its agent's conversations), acts as the operator of held trips,
arms, fires and calms the plan's faults, tends the workers, and counts where the tasks are.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

import django_rq
from django.db import connections
from django.db.models import Count, Min
from django.db.models.functions import Now

from agentops.effects import task_start
from agentops.operators.services import task_approve, task_reject
from devtools.chaos.agent import Agent, asks_of
from devtools.chaos.audit import Hit
from devtools.chaos.naive import (
    NAIVE_JOB,
    approval_path,
    decision_path,
    read_json,
    record_path,
    started_path,
    write_whole,
)
from devtools.chaos.plan import Event, Plan, TaskSpec
from devtools.chaos.run.base import OPERATOR, db_or, mcp_clients
from devtools.chaos.world import World
from devtools.stack.control import stack_control
from journal.models import Approval, ApprovalState, Entry, EntryKind, Step, Task, TaskStatus
from journal.status import ADVANCING, FINAL

# A cluster fault and what the run asks its cluster for (devtools.chaos.cluster's control).
CLUSTER_CONTROL = {
    "postgres_failover": "restart failover",
    "postgres_switchover": "restart switchover",
    "postgres_isolate": "restart isolate",
}


@dataclass
class Driver:
    """One run as it goes: what it has started, fired and seen so far."""

    plan: Plan
    harness: str
    world: World
    servers: set[str]
    started: float = field(default_factory=time.time)
    """When the run began (``time.time()``): the plan's events are seconds after it."""
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
    cluster_faults: list[dict[str, Any]] = field(default_factory=list)
    """Each cluster fault (``--cluster``): its kind, moment, what the cluster said, and the
    seconds from it to the journal's next commit."""
    committed_before: list[dict[int, str] | None] = field(default_factory=list)
    _fault_at: dict[int, float] = field(default_factory=dict)
    """Each cluster fault's moment (wall clock, taken before it began), by its index."""

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
        rows: list[uuid.UUID] = db_or(
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
            found = db_or(
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
        pending: list[tuple[int, uuid.UUID, str]] = db_or(
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
        elif event.kind in CLUSTER_CONTROL:
            if "failover" not in self.servers:
                self.skipped[event.kind] += 1
                return
            before = self._committed()
            struck = self._waiting_on_a_doorbell(at)
            request = CLUSTER_CONTROL[event.kind]
            if event.duration:
                request += f" {event.duration:g}"
            answer = stack_control(request) or {}
            connections.close_all()
            if not answer.get("ok"):
                self.skipped[event.kind] += 1
                self.cluster_faults.append({"kind": event.kind, "error": answer.get("error")})
                return
            self.hits += [Hit(event.kind, at, task, due) for task, due in struck]
            self.committed_before.append(before)
            self.cluster_faults.append(
                {"kind": event.kind, "at_s": round(at - self.started, 2), "answer": answer}
            )
            self._fault_at[len(self.cluster_faults) - 1] = at
        elif event.kind == "rolling_deploy":
            version = self.world.deploy()
            self.cluster_faults.append(
                {"kind": event.kind, "at_s": round(at - self.started, 2), "version": version}
            )
            self._fault_at[len(self.cluster_faults) - 1] = at
        elif event.kind == "provider_down":
            self.world.admin(event.target, lambda c: c.fault("*", "down", delay=event.duration))
        elif event.kind == "mcp_server_kill":
            if self.harness != "mcp":
                return  # no MCP server in this harness's world: not a fault it meets
            self.world.mcp_kill()
            self.mcp_kills.append(at)
        if event.kind != "provider_down":  # the provider logs its own
            self.process_faults[event.kind] += 1

    # --- the cluster (``--cluster``: devtools.chaos.cluster) -----------------------------

    def _committed(self) -> dict[int, str] | None:
        """Every step of the run's tasks as the primary shows it committed: what a failover
        must not lose (with a synchronous standby, a commit is shown only once it has it)."""
        if self.harness == "naive":
            return None
        rows = db_or(
            lambda: list(Step.objects.filter(task_id__in=self.ids).values_list("pk", "state")),
            None,
        )
        return None if rows is None else {int(pk): str(state) for pk, state in rows}

    def recoveries(self) -> None:
        """Once the run is over: each cluster fault's seconds to the journal's next commit,
        read from the journal itself (the first step recorded or settled whose transaction
        began after the fault did, by PostgreSQL's clock, the same host's), not from this
        loop, which may be held meanwhile (an agent's call waiting on the MCP server, a
        task's start waiting on the database) and would see it late. None: never."""
        kinds = (EntryKind.STEP_RECORDED, EntryKind.STEP_SETTLED)

        def first_since(since: datetime) -> datetime | None:
            found: datetime | None = Entry.objects.filter(at__gte=since, kind__in=kinds).aggregate(
                first=Min("at")
            )["first"]
            return found

        for index, at in self._fault_at.items():
            since = datetime.fromtimestamp(at, tz=UTC)
            first = db_or(partial(first_since, since), None)
            self.cluster_faults[index]["recovery_s"] = (
                round(first.timestamp() - at, 2) if first is not None else None
            )

    def committed_lost(self) -> tuple[int, list[str]] | None:
        """Steps shown committed before a cluster fault that are missing after the run, or
        whose settlement changed: with ``examples``. None for a run with no such fault."""
        if not self.committed_before or self.harness == "naive":
            return None  # the naive loop keeps nothing in PostgreSQL
        after = self._committed() or {}
        lost = []
        for before in self.committed_before:
            for pk, state in (before or {}).items():
                now = after.get(pk)
                if now is None or (state in ("done", "not_done") and now != state):
                    lost.append(f"step {pk}: {state} before, {now or 'missing'} after")
        unique = sorted(set(lost))
        return len(unique), unique[:10]

    def _held_by(self, pid: int, at: float) -> list[tuple[str, float]]:
        """The tasks a worker process is advancing now (they wait on it)."""
        if self.harness == "naive":
            return [(name, at) for name in self._naive_running(pid)]
        # agentops.version.runner_name: where it runs, then which version.
        owner = f"{self.host}:{pid} "
        held: list[uuid.UUID] = db_or(
            lambda: list(
                Task.objects.filter(
                    pk__in=self.ids, lease_owner__startswith=owner, lease_expires_at__gt=Now()
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
        rows: list[tuple[uuid.UUID, datetime | None]] = db_or(
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
        rows = db_or(
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
        rows = db_or(
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
