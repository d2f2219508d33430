"""Running tasks on RQ workers. Postgres is the truth; Redis is only a doorbell.

- ``task_start`` records a task and rings for it after commit.
- ``task_run`` is what a worker job does: advance the task under its lease (journal),
  then, if it waits on an unknown step, ring again at the step's lookup time (RQ's
  scheduler, ``rqworker --with-scheduler``).
- ``tasks_sweep`` rings for every task the journal says is runnable and no live lease
  holds: after a killed worker, a lost job, or a Redis that restarted empty.

A ring is idempotent in effect: a second job for a task whose lease is held stops at once
("busy"). RQ never retries a job on its own here; the journal decides what runs again.
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import datetime
from functools import partial
from typing import Any
from uuid import UUID

import django_rq
from django.conf import settings
from django.db import transaction

from agentops.decisions import decision_rung
from agentops.kinds import (
    TaskRefused,
    kind_get,
    plan_problems_of,
    planner_bound,
    rules_for,
    task_problems,
    tools_for,
)
from agentops.planners import planner_get
from agentops.telemetry.steps import run_observed
from agentops.workers import RUN_JOB
from journal import operator
from journal.models import Task, TaskStatus
from journal.policy import Policy
from journal.record import task_create
from journal.run import Advance, DatabaseLost, task_advance, task_take, task_unbuildable
from journal.selectors import task_list_runnable

log = logging.getLogger(__name__)

RANG_KEY = "agentops:rang:{}"
SWEPT_KEY = "agentops:swept:{}"


def task_start(
    *,
    kind: str,
    goal: str,
    refs: dict[str, Any] | None = None,
    actor: str = "",
    plan: list[dict[str, Any]] | None = None,
) -> Task:
    """Record a task, then ring for a worker once the record is committed (one statement:
    journal_task_create).

    Refuses (:class:`TaskRefused`, nothing recorded) an unknown kind, and a goal or refs that
    the kind does not accept: a task whose refs lack an amount would otherwise fail on every
    run, and one whose receipt address is not an address would charge before it failed.
    """
    task_kind = kind_get(kind)
    problems = task_problems(kind=task_kind, goal=goal, refs=refs or {})
    if plan is not None or task_kind.saga is not None:
        plan = plan if plan is not None else task_kind.saga.default_plan()  # type: ignore[union-attr]
        problems += plan_problems_of(kind=task_kind, plan=plan)
    if problems:
        raise TaskRefused(problems)
    # One statement, committed by itself (one round trip), unless a caller's transaction holds
    # it: the ring goes once it is committed, now or when that transaction commits.
    task = task_create(kind=kind, goal=goal, refs=refs or {}, actor=actor, plan=plan or [])
    task_id = task.pk
    transaction.on_commit(lambda: task_ring(task_id=task_id))
    return task


_queues: dict[int, Any] = {}


def run_queue() -> Any:
    """The queue runs are rung on, one per process with its connection pool kept: django_rq
    makes a new client, pool and connection on every call (and redis-py reads its own
    package metadata for each new connection: milliseconds per ring). A pool reconnects by
    itself after Redis restarts; a forked child makes its own."""
    queue = _queues.get(os.getpid())
    if queue is None:
        queue = _queues[os.getpid()] = django_rq.get_queue("default")
    return queue


def task_ring(*, task_id: UUID, at: datetime | None = None, quiet: float | None = None) -> None:
    """Enqueue a run of the task, now or at ``at``. Losing this loses nothing (the sweeper).

    The sweeper leaves the task alone for ``quiet`` seconds (SWEEP_GRACE_SECONDS)."""
    queue = run_queue()
    options: dict[str, Any] = {
        "job_timeout": settings.RUN_JOB_TIMEOUT_SECONDS,
        # A run's result is in the journal: RQ keeps none (a failure, for a week).
        "result_ttl": 0,
        "failure_ttl": 7 * 24 * 3600,
        "description": f"run task {task_id}",
    }
    rang = RANG_KEY.format(task_id)
    quiet_ms = max(1, round(1000 * (settings.SWEEP_GRACE_SECONDS if quiet is None else quiet)))
    if at is None:
        # The job and the note that it was rung for, in one round trip.
        with queue.connection.pipeline() as pipe:
            queue.enqueue(RUN_JOB, str(task_id), pipeline=pipe, **options)
            pipe.set(rang, "1", px=quiet_ms)
            pipe.execute()
    else:
        queue.enqueue_at(at, RUN_JOB, str(task_id), **options)
        queue.connection.set(rang, "1", px=quiet_ms)


def task_policy(task: Task) -> Policy:
    return Policy(
        lookup_schedule=tuple(settings.RECONCILE_SCHEDULE),
        transient_retry_delays=tuple(settings.TRANSIENT_RETRY_SCHEDULE),
        max_steps=kind_get(task.kind).max_steps,
        max_failed_runs=settings.MAX_FAILED_RUNS,
        approval_ttl=settings.APPROVAL_TTL_SECONDS,
    )


def task_run(*, task_id: UUID) -> Advance:
    """Advance the task as far as it goes now; ring again at its wake-up time if it waits.

    Whatever the planner or a tool adapter raises is recorded by the runner as the reason
    the task needs a human (journal.run); only a lost database ends a run with an error
    (``DatabaseLost``), after the lease is given back as soon as the database answers
    again, and the task is rung for at once; runs that keep failing are bounded.
    """
    owner = f"{socket.gethostname()}:{os.getpid()}"
    # The lease and what the runner is built from, in one statement.
    taken = task_take(task_id=task_id, owner=owner)
    if taken is None:
        run_observed(task_id=task_id, stopped="busy")
        log.info("task %s: busy", task_id, extra={**_task(task_id), "stopped": "busy"})
        return Advance("busy")
    task, lease = taken
    try:
        tools = tools_for(task)
        policy, rules = task_policy(task), rules_for(task)
        # What the kind binds into a call (the customer's link) is the harness's to write.
        planner = planner_bound(planner_get(tools), rules)
    except Exception as exc:  # a setting, a key, an import: never a crash loop nobody sees
        log.exception("task %s: its runner could not be built", task_id, extra=_task(task_id))
        unbuilt = task_unbuildable(
            task_id=task.pk,
            owner=owner,
            reason=f"the runner for this {task.kind} task could not be built "
            f"({type(exc).__name__}: {str(exc)[:300]}); fix the configuration, then resume it",
            lease=lease,
        )
        run_observed(task_id=task_id, stopped=unbuilt.stopped)
        return unbuilt
    try:
        result = task_advance(
            task_id=task.pk,
            planner=planner,
            tools=tools,
            owner=owner,
            policy=policy,
            rules=rules,
            lease=lease,
        )
    except DatabaseLost as lost:
        run_observed(task_id=task_id, stopped="database_lost", events=lost.events)
        if lost.released:
            # The lease is free again: ring now. The sweeper would too, but only once this
            # task's last ring is older than SWEEP_GRACE_SECONDS.
            try:
                task_ring(task_id=task_id)
            except Exception:  # Redis away as well: the sweeper rings later
                log.warning(
                    "task %s: could not ring again after losing the database",
                    task_id,
                    extra=_task(task_id),
                )
        raise
    # Everything the run wrote is committed: what its moves said they did to its steps is
    # logged, one line a thing, and counted (agentops/telemetry/steps.py).
    run_observed(task_id=task_id, stopped=result.stopped, events=result.events)
    if result.stopped == "waiting":
        wake_at = Task.objects.filter(pk=task_id, status=TaskStatus.WAITING).values_list(
            "wake_at", flat=True
        )
        if wake_at and wake_at[0] is not None:
            task_ring(task_id=task_id, at=wake_at[0])
    log.info(
        "task %s: %s after %s steps",
        task_id,
        result.stopped,
        result.steps_performed,
        extra={**_task(task_id), "stopped": result.stopped},
    )
    return result


def _task(task_id: UUID) -> dict[str, str]:
    """The ``extra`` of a line about a task: its id, as every line about its steps has it."""
    return {"task_id": str(task_id)}


def task_resume(*, task_id: UUID, actor: str, reason: str) -> TaskStatus:
    """A person lets a task that needs a human go on (journal.operator); if it can advance,
    it is rung for. Returns its status now."""
    with transaction.atomic():
        status = operator.task_resume(task_id=task_id, actor=actor, reason=reason)
        if status == TaskStatus.RUNNABLE:
            transaction.on_commit(lambda: task_ring(task_id=task_id))
    return status


def task_cancel(*, task_id: UUID, actor: str, reason: str) -> None:
    """A person stops a task that needs a human (journal.operator)."""
    operator.task_cancel(task_id=task_id, actor=actor, reason=reason)


def steps_reconcile_now(*, step_ids: list[int], actor: str, reason: str = "") -> None:
    """A person has these open steps looked up now (journal.operator); their tasks are rung."""
    with transaction.atomic():
        woken = operator.steps_reconcile_now(step_ids=step_ids, actor=actor, reason=reason)
        for task_id in woken:
            transaction.on_commit(partial(task_ring, task_id=task_id))


def step_resolve(
    *, step_id: int, actor: str, done: bool, evidence: str = "", reason: str = ""
) -> int:
    """A person settles an open step by hand (journal.operator.step_resolve): the decision is
    recorded, and a worker rung to apply it once that is committed (agentops.decisions).
    Returns the decision's id."""
    with transaction.atomic():
        return decision_rung(
            operator.step_resolve(
                step_id=step_id, actor=actor, done=done, evidence=evidence, reason=reason
            )
        )


def step_correct(*, step_id: int, actor: str, evidence: dict[str, Any], reason: str) -> int:
    """A person corrects a step settled not done that happened after all
    (journal.operator.step_correct), with the tools of its task's kind: the decision is
    recorded, and a worker rung to apply it. Returns the decision's id."""
    task = Task.objects.get(steps__pk=step_id)
    with transaction.atomic():
        return decision_rung(
            operator.step_correct(
                step_id=step_id,
                actor=actor,
                evidence=evidence,
                reason=reason,
                tools=tools_for(task),
            )
        )


def task_approve(
    *, task_id: UUID, approval_id: int, digest: str, actor: str, reason: str = ""
) -> bool:
    """A person approves a held saga step (journal.operator.approval_approve), with an
    optional reason; the task is rung for either way (approved: it goes on; expired: it asks
    again)."""
    with transaction.atomic():
        approved = operator.approval_approve(
            task_id=task_id, approval_id=approval_id, digest=digest, actor=actor, reason=reason
        )
        transaction.on_commit(lambda: task_ring(task_id=task_id))
    return approved


def task_reject(*, task_id: UUID, approval_id: int, actor: str, reason: str) -> None:
    """A person rejects a held saga step: the saga compensates what it did."""
    with transaction.atomic():
        operator.approval_reject(
            task_id=task_id, approval_id=approval_id, actor=actor, reason=reason
        )
        transaction.on_commit(lambda: task_ring(task_id=task_id))


def task_compensate(*, task_id: UUID, actor: str, reason: str) -> None:
    """A person has a saga compensate now."""
    with transaction.atomic():
        operator.saga_compensate(task_id=task_id, actor=actor, reason=reason)
        transaction.on_commit(lambda: task_ring(task_id=task_id))


def tasks_sweep() -> int:
    """Ring for every runnable task without a live lease that was not rung for recently.

    A task the sweeper rang for that no run has taken since (its lease token has not moved:
    the job still waits behind stalled or busy workers, or was lost) is rung again after a
    pause that doubles each time, up to SWEEP_BACKOFF_MAX_SECONDS. A lost job is still found
    again, and a queue waiting for its workers does not fill with copies of one run.
    """
    redis = run_queue().connection
    grace = settings.SWEEP_GRACE_SECONDS
    most = max(grace, settings.SWEEP_BACKOFF_MAX_SECONDS)
    rung = 0
    for task_id, token in task_list_runnable().values_list("pk", "lease_token"):
        if redis.exists(RANG_KEY.format(task_id)):
            continue
        swept = SWEPT_KEY.format(task_id)
        quiet = grace
        last = redis.get(swept)  # "<lease token>:<pause>" as of the sweeper's last ring
        if last is not None:
            last_token, last_quiet = last.decode().split(":")
            if int(last_token) == token:
                quiet = min(2 * float(last_quiet), most)
        task_ring(task_id=task_id, quiet=quiet)
        redis.set(swept, f"{token}:{quiet:g}", px=round(1000 * (2 * quiet + grace)))
        rung += 1
        # One line a task, with its id: a search for the task finds the sweeper's part too.
        log.info(
            "task %s: runnable and no run holds it: rang for it (next in %g s at the earliest)",
            task_id,
            quiet,
            extra={**_task(task_id), "quiet_seconds": quiet},
        )
    return rung
