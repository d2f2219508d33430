"""The RQ worker runs agentops' own jobs and nothing else (issue 8).

RQ runs whatever function a job names, imported by its dotted path: anyone who can write to
Redis could enqueue ``os.system``. A job is only a doorbell here (docs/design.md §4), so the worker
accepts exactly the functions in :data:`JOBS`, no callbacks, no bound instance, and reads
jobs as JSON only (a pickled payload runs code while it is read, before any check).
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from rq.executions import Execution
from rq.job import Job, JobStatus, Retry
from rq.queue import Queue
from rq.results import Result
from rq.serializers import JSONSerializer
from rq.utils import now
from rq.worker import SimpleWorker, WorkerStatus

from agentops.telemetry import instruments

# Every function a worker may run, by the dotted name RQ stores. Add new jobs here.
# The job every ring enqueues (agentops.doorbell.task_ring): a task's run.
RUN_JOB = "agentops.jobs.run_task"
# A notification's attempt (agentops.notifications.services.delivery_ring).
DELIVER_JOB = "agentops.jobs.deliver_notification"
# An audit of one provider's records (agentops.audit.services.audit_ring).
AUDIT_JOB = "agentops.jobs.audit_provider"
# The journal's retention, daily (agentops.retention.retention_sweep).
RETENTION_JOB = "agentops.jobs.journal_retain"
# A provider's notification, stored by the web server (agentops.provider_events).
APPLY_EVENT_JOB = "agentops.jobs.apply_provider_event"
# A person's decision about a step, recorded by the web server (agentops.decisions).
APPLY_DECISION_JOB = "agentops.jobs.apply_person_decision"
JOBS = frozenset(
    {RUN_JOB, DELIVER_JOB, AUDIT_JOB, RETENTION_JOB, APPLY_EVENT_JOB, APPLY_DECISION_JOB}
)

# The ``manage.py`` arguments that start one worker: the default queue, the scheduler that
# rings delayed doorbells, JSON jobs only.
WORKER_ARGS = (
    "rqworker",
    "default",
    "--with-scheduler",
    "--serializer",
    "rq.serializers.JSONSerializer",
)


class JobRefused(Exception):
    """A job names something that is not one of agentops' jobs; it fails, nothing runs."""


class AgentopsJob(Job):
    """A job that runs only if it names one of :data:`JOBS`, with no callbacks."""

    allowed: frozenset[str] = JOBS

    def refusal(self) -> str | None:
        """Why this job must not run, or None."""
        if self.func_name not in self.allowed:
            return f"{self.func_name!r} is not an agentops job (allowed: {sorted(self.allowed)})"
        if self.instance is not None:
            return "agentops jobs are plain functions, not methods of a stored instance"
        callbacks = (
            self._success_callback_name,
            self._failure_callback_name,
            self._stopped_callback_name,
        )
        if any(callbacks):
            return f"agentops jobs take no callbacks ({[c for c in callbacks if c]})"
        return None

    def perform(self) -> Any:
        refused = self.refusal()
        if refused is not None:
            raise JobRefused(f"job {self.id} refused: {refused}")
        return super().perform()

    # A refused job still fails through RQ's usual path, which would import and call its
    # callbacks by name: they are never looked up.
    @property
    def success_callback(self) -> None:
        return None

    @property
    def failure_callback(self) -> None:
        return None

    @property
    def stopped_callback(self) -> None:
        return None


class AgentopsWorker(SimpleWorker):
    """RQ's non-forking worker (docs/concepts.md, "Workers"), with AgentopsJob and JSON, always.

    Whatever ``--job-class`` or ``--serializer`` it is started with, jobs are read as JSON
    by :class:`AgentopsJob`; another job class is refused at start.
    """

    jobs: type[AgentopsJob] = AgentopsJob
    """The job class it reads every job as (a subclass may allow other jobs)."""

    def __init__(
        self,
        queues: Any,
        *,
        job_class: type[Job] | str | None = None,
        serializer: Any = None,
        **kwargs: Any,
    ) -> None:
        if job_class not in (None, AgentopsJob, f"{__name__}.AgentopsJob", self.jobs):
            raise ValueError(f"agentops workers run {self.jobs.__name__} only, not {job_class!r}")
        self._beaten: tuple[float, float] | None = None
        """When the last beat went to Redis, and until when it keeps the keys (monotonic)."""
        self._started: str | None = None
        """The job whose start went with its execution's (:meth:`prepare_execution`)."""
        self._idle_sent = False
        """Whether Redis holds this worker idle as it last wrote it (:meth:`set_state`)."""
        self._suspension_asked: float | None = None
        """When Redis was last asked whether workers are suspended (monotonic)."""
        super().__init__(queues, job_class=self.jobs, serializer=JSONSerializer, **kwargs)

    # The heartbeat (agentops_heartbeat_timestamp_seconds{process="worker"}) beats while the
    # worker waits for a job and around each one it runs. RQ beats when its blocking wait for
    # a job times out, by default every worker_ttl - 15 s (405 s): waiting at most this long
    # at a time, an idle worker shows it is alive well within the alert's 5 minutes.
    heartbeat_seconds = 30

    # RQ beats to Redis (the worker's key and its executions' kept alive, three commands each
    # time, not pipelined) when it waits for a job, twice as it takes one and as it starts it:
    # five times a job, most of a job's commands to Redis. A beat that keeps the keys no longer
    # than the last one did, within this many seconds of it, is not sent again: they live at
    # least as long, less this, as asked.
    heartbeat_every = 1.0

    @property
    def dequeue_timeout(self) -> int:
        return int(min(super().dequeue_timeout, self.heartbeat_seconds))

    def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
        instruments.heartbeat(instruments.WORKER)
        at = time.monotonic()
        lasting = timeout or self.worker_ttl + 60  # RQ's own default
        if self._beaten is not None:
            sent_at, until = self._beaten
            if at - sent_at < self.heartbeat_every and at + lasting <= until + self.heartbeat_every:
                return
        super().heartbeat(timeout, pipeline)
        self._beaten = (at, at + lasting)

    # RQ asks Redis whether workers are suspended (``rq suspend``) before every job: a round
    # trip a job. Asked at most this often (seconds), a busy worker takes no new job from a
    # second after the suspension; RQ's own worker lags too, differently: one waiting for a
    # job when it is suspended runs the next that comes without asking again.
    suspension_every = 1.0

    def check_for_suspension(self, burst: bool) -> None:
        at = time.monotonic()
        if self._suspension_asked is not None and at - self._suspension_asked < (
            self.suspension_every
        ):
            return
        super().check_for_suspension(burst)
        self._suspension_asked = time.monotonic()

    def execute_job(self, job: Job, queue: Any) -> None:
        instruments.heartbeat(instruments.WORKER)
        try:
            super().execute_job(job, queue)
        finally:
            instruments.heartbeat(instruments.WORKER)

    # RQ starts a job in two round trips, one after the other: the execution (its hash, its
    # registries, the worker busy), then the job (the worker's beat, the job's status, its
    # key kept, out of the queue's intermediate list). Both here, in one; the job's own beat
    # is left out, as the status written with it sets the same field of the same hash.

    def prepare_execution(self, job: Job) -> Execution:
        with self.connection.pipeline() as pipe:
            ttl = self.get_heartbeat_ttl(job)
            execution = Execution.create(job, ttl, pipeline=pipe, worker_name=self.name)
            self.executions[execution.id] = execution
            self.set_state(WorkerStatus.BUSY, pipeline=pipe)
            self.heartbeat(ttl, pipeline=pipe)
            job.prepare_for_execution(self.name, pipeline=pipe)
            pipe.persist(job.key)
            if len(self.queues) == 1:  # as RQ's perform_job decides it
                pipe.lrem(
                    Queue(job.origin, connection=self.connection).intermediate_queue_key, 1, job.id
                )
            pipe.execute()
        self._started = job.id
        return execution

    # RQ says the worker is idle twice between two jobs, a round trip each: as a job ends
    # (SimpleWorker.execute_job) and as it waits for the next (dequeue_job_and_maintain_ttl).
    # A lean job's finish says it in its own round trip (:meth:`_finalize_success`); nothing
    # but this worker writes its state, so an idle state it wrote, with nothing written since,
    # is not sent again.

    def set_state(self, state: str, pipeline: Any = None) -> None:
        if state == WorkerStatus.IDLE and pipeline is None and self._idle_sent:
            self._state = state
            return
        super().set_state(state, pipeline)
        self._idle_sent = state == WorkerStatus.IDLE and pipeline is None

    def prepare_job_execution(self, job: Job, remove_from_intermediate_queue: bool = False) -> None:
        if self._started == job.id:
            self._started = None
            self.procline(f"Processing {job.func_name} from {job.origin} since {time.time()}")  # type: ignore[no-untyped-call]
            return
        super().prepare_job_execution(job, remove_from_intermediate_queue)

    # RQ listens for commands (``rq`` stop-job, shutdown) on a pub/sub channel, in a thread
    # that waits for a message up to 60 s at a time. Once the worker unsubscribes, redis-py's
    # stop waits for that thread, and a thread that read the unsubscribe before it was told to
    # stop waits out its whole 60 s for a subscription that will not come: a worker's end
    # (a deploy's warm shutdown, a burst) could take a minute. Waiting a second at a time, the
    # thread sees the stop within a second; it wakes the process, never Redis.
    pubsub_wait_seconds = 1.0

    def subscribe(self) -> None:
        self.log.info("Worker %s: subscribing to channel %s", self.name, self.pubsub_channel_name)
        self.pubsub = self.connection.pubsub()
        self.pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})
        # RQ declares the attribute None (untyped), as before it subscribes.
        self.pubsub_thread = self.pubsub.run_in_thread(  # type: ignore[assignment]
            sleep_time=self.pubsub_wait_seconds,
            daemon=True,
            exception_handler=self._pubsub_exception_handler,
        )

    def work(self, *args: Any, **kwargs: Any) -> bool:
        # django-rq's command hands RQ the level its verbosity says (INFO unless -v 0), which RQ
        # sets on its own loggers (the worker's, its scheduler's): the operator's LOG_LEVEL
        # decides, as for every other line. RQ's second parameter, by name or by place.
        if len(args) > 1:
            args = (args[0], settings.LOG_LEVEL, *args[2:])
        else:
            kwargs["logging_level"] = settings.LOG_LEVEL
        return bool(super().work(*args, **kwargs))

    # A run's result is in the journal, not in RQ (docs/design.md §4, §14): our rings keep none
    # (result_ttl 0), have no dependents, repeats, group, rate limit or webhook, and are never
    # retried by RQ. RQ finishes such a job as it finishes any: it beats for the job it is about
    # to delete, watches and reads its dependents, reads its status, and reads its executions
    # twice over, one round trip each, before the commands that delete it. For a job like ours,
    # the same end state in one round trip.

    def _lean(self, job: Job, return_value: Any) -> bool:
        """Whether this job may be finished in one round trip: nothing of it outlives it."""
        return (
            not isinstance(return_value, Retry)
            and job.get_result_ttl(self.default_result_ttl) == 0
            and not job.repeats_left
            and not job.webhooks
            and not job.group_id
            and not job.has_rate_limit
        )

    def _finalize_success(self, job: Job, queue: Any, execution: Any, return_value: Any) -> None:
        if not self._lean(job, return_value):
            super()._finalize_success(job, queue, execution, return_value)
            return
        job.ended_at = now()
        job._result = return_value
        job._status = JobStatus.FINISHED
        with self.connection.pipeline() as pipe:
            self.increment_successful_job_count(pipeline=pipe)
            self.increment_total_working_time(job.ended_at - (job.started_at or job.ended_at), pipe)
            # This execution: its hash, its place in the started registry, the job's registry
            # of executions and the worker's set (RQ's own Execution.delete).
            execution.delete(job=job, pipeline=pipe)
            # The worker idle in Redis, as SimpleWorker.execute_job writes it next (its write
            # is then skipped: set_state). Redis only: the worker is busy until the job is
            # over, for a stop signal to wait for it (RQ's _shutdown reads the state).
            pipe.hset(self.key, "state", WorkerStatus.IDLE)
            pipe.delete(
                job.key,
                job.dependents_key,
                job.dependencies_key,
                job.execution_registry.key,
                Result.get_key(job.id),  # type: ignore[no-untyped-call]
            )
            pipe.execute()
        self._idle_sent = True
        self.executions.pop(execution.id, None)
        self.log.info("Worker %s: %s: Job OK (%s)", self.name, job.origin, job.id)
