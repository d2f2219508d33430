"""Running tasks on RQ workers. Postgres is the truth; Redis is only a doorbell
(agentops/doorbell.py: a task is started by ``agentops.effects.task_start``, which rings for
it once committed).

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
from uuid import UUID

from django.conf import settings

from agentops.doorbell import RANG_KEY, run_queue, task_ring
from agentops.kinds import kind_get, planner_bound, rules_for, tools_for
from agentops.planners import planner_get
from agentops.telemetry.steps import run_observed
from agentops.version import runner_name
from journal.models import Task, TaskStatus
from journal.policy import Policy
from journal.run import Advance, DatabaseLost, task_advance, task_take, task_unbuildable
from journal.selectors import task_list_runnable
from journal.status import waiters_wake

log = logging.getLogger(__name__)

SWEPT_KEY = "agentops:swept:{}"


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
    owner = runner_name(socket.gethostname(), os.getpid())
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
    _waiters_woken(result)
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


def _waiters_woken(result: Advance) -> None:
    """A step that had been unknown settled in this run (a lookup: one a person asked for,
    or the task a person resumed): the tasks the guard kept waiting on it are woken and rung
    now, not at their backed-off time (up to the longest lookup delay). A step settled at
    its first attempt was in flight for seconds, and costs no statement here."""
    for event in result.events:
        if event.what != "settled" or not (event.unknown_for is not None or event.maybe_unknown):
            continue
        for waiter in waiters_wake(key=event.step_key, actor="harness"):
            task_ring(task_id=waiter)


def _task(task_id: UUID) -> dict[str, str]:
    """The ``extra`` of a line about a task: its id, as every line about its steps has it."""
    return {"task_id": str(task_id)}


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
