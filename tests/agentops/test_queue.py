"""A queue that runs only our jobs (issue 8), attacked with a local Redis client.

The embedded Redis requires a password; whoever has it still cannot make a worker run
anything but agentops' own jobs.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import django_rq
import pytest
import redis
from rq.job import Job, JobStatus
from rq.queue import Queue
from rq.serializers import JSONSerializer

from agentops.workers import DELIVER_JOB, WORKER_ARGS, AgentopsJob, AgentopsWorker, JobRefused
from devtools.process import wait_until
from tests.agentops.workers import Fleet


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    return urlunsplit(parts._replace(netloc=f"{host}:{parts.port or 6379}"))


@pytest.mark.stack("redis")  # the embedded Redis, with the password stack.py gave it
def test_redis_refuses_a_client_without_the_password() -> None:
    url = os.environ["REDIS_URL"]
    assert urlsplit(url).password, "scripts/stack.py's Redis has a password"
    stranger = redis.Redis.from_url(_without_password(url))
    with pytest.raises(redis.exceptions.AuthenticationError):
        stranger.ping()
    with pytest.raises(redis.exceptions.AuthenticationError):
        stranger.lpush("rq:queue:default", "x")


@pytest.mark.stack("redis")  # a server we configured
def test_redis_refuses_commands_that_write_files_or_load_code() -> None:
    url = os.environ["REDIS_URL"]
    insider = redis.Redis.from_url(url)
    for command in (
        ("CONFIG", "SET", "dir", "/var/www"),
        ("MODULE", "LIST"),
        ("SLAVEOF", "NO", "ONE"),
    ):
        with pytest.raises(redis.exceptions.ResponseError, match="unknown command"):
            insider.execute_command(*command)


def _enqueue_raw(function: str, **options: object) -> Job:
    """Enqueue the way a process holding the Redis password would: plain RQ, no agentops."""
    connection = redis.Redis.from_url(os.environ["REDIS_URL"])
    queue = Queue("default", connection=connection, serializer=JSONSerializer)
    return queue.enqueue(function, **options)


@pytest.mark.usefixtures("committed")
def test_a_worker_refuses_a_job_naming_a_foreign_function(fleet: Fleet) -> None:
    job = _enqueue_raw("os.getcwd")
    # A real worker process, as make run starts it, emptying the queue once.
    worker = fleet._start([*WORKER_ARGS, "--burst"])
    assert worker.wait(timeout=60) == 0
    job = Job.fetch(
        job.id, connection=django_rq.get_connection("default"), serializer=JSONSerializer
    )
    assert job.get_status() == JobStatus.FAILED
    assert job.return_value() is None  # os.getcwd() would have returned the directory
    result = job.latest_result()
    assert result is not None
    assert "JobRefused" in (result.exc_string or "")
    assert "'os.getcwd' is not an agentops job" in (result.exc_string or "")


def test_a_job_with_a_foreign_callback_is_refused_and_the_callback_never_resolved() -> None:
    job = AgentopsJob.create(
        "agentops.jobs.run_task",
        args=["00000000-0000-0000-0000-000000000000"],
        connection=django_rq.get_connection("default"),
        serializer=JSONSerializer,
    )
    assert isinstance(job, AgentopsJob)
    job._failure_callback_name = "os.abort"
    with pytest.raises(JobRefused, match="no callbacks"):
        job.perform()
    assert job.failure_callback is None


def test_workers_read_json_only_with_our_job_class() -> None:
    connection = django_rq.get_connection("default")
    worker = AgentopsWorker(
        [django_rq.get_queue("default")],
        connection=connection,
        serializer="rq.serializers.DefaultSerializer",  # pickle: ignored
    )
    assert worker.serializer is JSONSerializer
    assert worker.job_class is AgentopsJob
    with pytest.raises(ValueError, match="AgentopsJob only"):
        AgentopsWorker([django_rq.get_queue("default")], connection=connection, job_class=Job)


def test_our_own_job_is_accepted() -> None:
    job = AgentopsJob.create(
        "agentops.jobs.run_task",
        args=["x"],
        connection=django_rq.get_connection("default"),
        serializer=JSONSerializer,
    )
    assert isinstance(job, AgentopsJob)
    assert job.refusal() is None


@pytest.mark.usefixtures("committed")
def test_a_worker_beats_to_redis_at_most_once_a_second_while_it_runs_jobs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RQ beats five times a job, three commands each; within a second of a beat that keeps
    the worker's keys as long, the next is not sent (AgentopsWorker.heartbeat). One that must
    keep them longer (a job's own timeout) always is."""
    from rq.worker import SimpleWorker

    sent: list[int | None] = []
    real = SimpleWorker.heartbeat

    def counted(self: SimpleWorker, timeout: int | None = None, pipeline: object = None) -> None:
        sent.append(timeout)
        real(self, timeout, pipeline)  # type: ignore[arg-type]

    monkeypatch.setattr(SimpleWorker, "heartbeat", counted)
    queue = django_rq.get_queue("default", serializer=JSONSerializer)
    connection = queue.connection
    for i in range(10):  # nothing to deliver (no NOTIFY_URL): each job is done at once
        queue.enqueue("agentops.jobs.deliver_notification", i)
    worker = AgentopsWorker([queue], connection=connection, name=f"beats-{os.getpid()}")
    asked: list[int | None] = []
    beat = worker.heartbeat

    def asking(timeout: int | None = None, pipeline: object = None) -> None:
        asked.append(timeout)
        beat(timeout, pipeline)

    monkeypatch.setattr(worker, "heartbeat", asking)
    worker.work(burst=True)
    assert len(asked) >= 3 * 10  # RQ asks for a beat several times a job...
    assert len(sent) < len(asked) // 3  # ...and few go to Redis
    longer = max(t for t in asked if t is not None)
    before = len(sent)
    worker.heartbeat(longer + 600)
    assert sent[before:] == [longer + 600]


def _commands(connection: redis.Redis) -> int:
    """Commands the server has run so far, by its own count."""
    return sum(int(c["calls"]) for c in connection.info("commandstats").values())


@pytest.mark.usefixtures("committed")
def test_a_finished_ring_leaves_nothing_of_itself_in_redis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run's result is in the journal: a ring that finished (result_ttl 0, as task_ring
    enqueues it) leaves no key, no registry entry and no execution behind, finished in one
    round trip by AgentopsWorker; a job that asks for its result kept goes RQ's own way and
    keeps it. The worker's counts of jobs and working time go on as RQ keeps them."""
    from rq.registry import FailedJobRegistry, FinishedJobRegistry, StartedJobRegistry
    from rq.worker import SimpleWorker

    ours_rq: list[str] = []
    real = SimpleWorker._finalize_success

    def rqs_own(self: SimpleWorker, job: Job, *args: object) -> None:
        ours_rq.append(job.id)
        real(self, job, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(SimpleWorker, "_finalize_success", rqs_own)
    # A queue of its own: what other tests left queued goes through neither count.
    connection = django_rq.get_connection("default")
    queue = Queue(f"lean-{os.getpid()}", connection=connection, serializer=JSONSerializer)
    options = {"result_ttl": 0, "failure_ttl": 3600, "job_timeout": 60}
    rings = [queue.enqueue(DELIVER_JOB, i, **options) for i in range(8)]
    kept = queue.enqueue(DELIVER_JOB, 99, result_ttl=600)
    worker = AgentopsWorker([queue], connection=connection, name=f"lean-{os.getpid()}")
    worker.work(burst=True)

    assert ours_rq == [kept.id]
    finished = FinishedJobRegistry(queue=queue)
    assert finished.get_job_ids() == [kept.id]
    assert StartedJobRegistry(queue=queue).get_job_ids() == []
    assert FailedJobRegistry(queue=queue).get_job_ids() == []
    # Nothing anywhere names a finished ring: no key, no member of any set, list or hash.
    ids = {job.id for job in rings}
    for key in connection.scan_iter(count=1000):
        name = str(key)
        assert not any(i in name for i in ids), name
        kind = str(connection.type(key))
        members: list[Any] = []
        if "zset" in kind:
            members = list(connection.zrange(key, 0, -1))
        elif "set" in kind:
            members = list(connection.smembers(key))
        elif "list" in kind:
            members = list(connection.lrange(key, 0, -1))
        elif "hash" in kind:
            members = list(connection.hgetall(key).values())
        assert not any(i in str(m) for m in members for i in ids), (name, members)
    worker.refresh()
    assert worker.successful_job_count == 9
    assert worker.total_working_time > 0

    # What a ring costs Redis from the worker's side, counted by the server (taking it,
    # starting it, running it: nothing to deliver, no command of its own; and finishing it),
    # finished as RQ finishes any job, then as AgentopsWorker finishes ours.
    def per_ring(name: str) -> float:
        jobs = [queue.enqueue(DELIVER_JOB, i, **options) for i in range(20)]
        before = _commands(connection)
        worker = AgentopsWorker([queue], connection=connection, name=f"{name}-{os.getpid()}")
        worker.work(burst=True)
        return (_commands(connection) - before) / len(jobs)

    with monkeypatch.context() as rqs_way:
        rqs_way.setattr(AgentopsWorker, "_lean", lambda *a: False)
        rq_finishes = per_ring("rq")
    we_finish = per_ring("lean")
    assert we_finish <= rq_finishes - 12, (we_finish, rq_finishes)


@pytest.mark.usefixtures("committed")
def test_between_two_jobs_the_worker_is_idle_in_redis_said_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RQ writes the worker idle twice between two jobs, a round trip each (as a job ends and
    as the worker waits for the next); AgentopsWorker once, with a lean job's finish. Whoever
    reads the worker between jobs, a ring's or one that went RQ's way, reads it idle."""
    from redis.commands.core import HashCommands
    from rq.worker import BaseWorker

    connection = django_rq.get_connection("default")
    queue = Queue(f"idle-{os.getpid()}", connection=connection, serializer=JSONSerializer)
    between: list[Any] = []
    writes: list[Any] = []  # the worker's state, as written to Redis (in a pipeline or not)
    real_dequeue = BaseWorker.dequeue_job_and_maintain_ttl
    real_hset = HashCommands.hset

    def dequeue(self: BaseWorker, *args: Any, **kwargs: Any) -> Any:
        between.append(connection.hget(self.key, "state"))
        return real_dequeue(self, *args, **kwargs)

    def hset(self: Any, name: Any, *args: Any, **kwargs: Any) -> Any:
        if str(name).startswith("rq:worker:") and args[:1] == ("state",):
            writes.append(getattr(args[1], "value", args[1]))  # WorkerStatus, or its text
        return real_hset(self, name, *args, **kwargs)

    monkeypatch.setattr(BaseWorker, "dequeue_job_and_maintain_ttl", dequeue)
    monkeypatch.setattr(HashCommands, "hset", hset)

    def jobs_run(name: str) -> list[Any]:
        for i in range(4):
            queue.enqueue(DELIVER_JOB, i, result_ttl=0, job_timeout=60)
        queue.enqueue(DELIVER_JOB, 99, result_ttl=600)  # RQ's own finish
        queue.enqueue(DELIVER_JOB, 98, result_ttl=0, job_timeout=60)
        del between[:], writes[:]
        AgentopsWorker([queue], connection=connection, name=f"{name}-{os.getpid()}").work(
            burst=True
        )
        return between[1:]  # after each job (the first look follows the worker's birth)

    with monkeypatch.context() as rqs_way:
        rqs_way.setattr(AgentopsWorker, "set_state", BaseWorker.set_state)
        rqs_way.setattr(AgentopsWorker, "_lean", lambda *a: False)
        assert set(jobs_run("rq")) == {b"idle"}
    rq_idle = writes.count("idle")
    assert set(jobs_run("ours")) == {b"idle"}
    assert len(between) == 7  # six jobs, and the empty queue's last look
    assert rq_idle == 13  # at its start, then twice a job
    assert writes.count("idle") == 7, writes  # at its start, then once a job
    assert writes.count("busy") == 6, writes


@pytest.mark.usefixtures("committed")
def test_a_stop_signal_as_a_ring_finishes_stops_the_worker_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A warm stop (SIGTERM) that comes while a ring is being finished waits for it, as it
    waits for any job: the worker is busy until the job is over, though its finish already
    writes it idle in Redis. Read idle, RQ's handler would end the job there, failed."""
    import signal

    from rq.registry import FailedJobRegistry
    from rq.results import Result

    connection = django_rq.get_connection("default")
    queue = Queue(f"stop-{os.getpid()}", connection=connection, serializer=JSONSerializer)
    for i in range(3):
        queue.enqueue(DELIVER_JOB, i, result_ttl=0, failure_ttl=3600, job_timeout=60)
    sent = [0]
    real_key = Result.get_key

    def get_key(job_id: str) -> str:
        # Called as the finish's pipeline is built, after the worker's idle state is in it.
        if not sent[0]:
            sent[0] = 1
            os.kill(os.getpid(), signal.SIGTERM)
        return str(real_key(job_id))

    monkeypatch.setattr(Result, "get_key", staticmethod(get_key))
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        AgentopsWorker([queue], connection=connection, name=f"stop-{os.getpid()}").work(burst=True)
    finally:
        signal.signal(signal.SIGTERM, handlers[0])
        signal.signal(signal.SIGINT, handlers[1])
    assert sent[0] == 1
    assert len(queue) == 2  # stopped after the first
    assert FailedJobRegistry(queue=queue).get_job_ids() == []  # which finished, not failed


@pytest.mark.usefixtures("committed")
def test_a_worker_asks_whether_it_is_suspended_once_a_second_not_once_a_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``rq suspend`` still stops a worker taking new jobs, once it has asked; it asks Redis
    at most every ``suspension_every`` seconds, not before every job (a round trip each)."""
    from rq.suspension import is_suspended as real_asked
    from rq.suspension import resume, suspend
    from rq.worker import base

    connection = django_rq.get_connection("default")
    queue = Queue(f"suspend-{os.getpid()}", connection=connection, serializer=JSONSerializer)
    asked = [0]

    def is_suspended(*args: Any, **kwargs: Any) -> Any:
        asked[0] += 1
        return real_asked(*args, **kwargs)

    monkeypatch.setattr(base, "is_suspended", is_suspended)
    real_perform = AgentopsJob.perform

    def perform(job: AgentopsJob) -> Any:
        if job.args == [0]:
            suspend(connection)  # by the first job, as an operator would between two
        return real_perform(job)

    monkeypatch.setattr(AgentopsJob, "perform", perform)
    try:
        # Asked before every job: the second is not taken.
        monkeypatch.setattr(AgentopsWorker, "suspension_every", 0.0)
        for i in range(3):
            queue.enqueue(DELIVER_JOB, i, result_ttl=0, job_timeout=60)
        worker = AgentopsWorker([queue], connection=connection, name=f"s0-{os.getpid()}")
        assert worker.work(burst=True) is True
        assert len(queue) == 2 and asked[0] == 2
        resume(connection)
        # Asked once a minute: once, for all of them.
        monkeypatch.setattr(AgentopsWorker, "suspension_every", 60.0)
        monkeypatch.setattr(AgentopsJob, "perform", real_perform)
        for i in range(1, 9):
            queue.enqueue(DELIVER_JOB, i, result_ttl=0, job_timeout=60)
        asked[0] = 0
        worker = AgentopsWorker([queue], connection=connection, name=f"s60-{os.getpid()}")
        worker.work(burst=True)
        assert len(queue) == 0 and asked[0] == 1
    finally:
        resume(connection)


@pytest.mark.usefixtures("committed")
def test_a_ring_costs_a_worker_four_round_trips_to_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    """Taking it, reading it, starting it, finishing it (docs/design.md §14): counted at the
    client's socket over a hundred rings that do nothing of their own with Redis, a worker's
    start and end shared among them."""
    from redis.connection import Connection

    sends = [0]
    real_send = Connection.send_packed_command

    def counted(self: Connection, *args: Any, **kwargs: Any) -> None:
        sends[0] += 1
        real_send(self, *args, **kwargs)

    connection = django_rq.get_connection("default")
    queue = Queue(f"trips-{os.getpid()}", connection=connection, serializer=JSONSerializer)
    for i in range(100):
        queue.enqueue(DELIVER_JOB, i, result_ttl=0, failure_ttl=3600, job_timeout=60)
    monkeypatch.setattr(Connection, "send_packed_command", counted)
    AgentopsWorker([queue], connection=connection, name=f"trips-{os.getpid()}").work(burst=True)
    assert len(queue) == 0
    assert sends[0] / 100 < 4.5, sends[0]


@pytest.mark.usefixtures("committed")
def test_a_ring_starts_in_one_round_trip_leaving_what_rqs_start_leaves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RQ starts a job in two round trips (its execution, then the job); AgentopsWorker in
    one. While the job runs, Redis holds what RQ's own start leaves: the job started by this
    worker, in the started registry with one execution, out of the queue and its
    intermediate list, the worker busy. Round trips counted at the client's socket: one
    write a round trip."""
    from redis.connection import Connection
    from rq.registry import StartedJobRegistry
    from rq.worker import SimpleWorker

    sends = [0]
    real_send = Connection.send_packed_command

    def counted(self: Connection, *args: Any, **kwargs: Any) -> None:
        sends[0] += 1
        real_send(self, *args, **kwargs)

    monkeypatch.setattr(Connection, "send_packed_command", counted)
    connection = django_rq.get_connection("default")
    queue = Queue(f"start-{os.getpid()}", connection=connection, serializer=JSONSerializer)
    seen: list[dict[str, Any]] = []
    real_perform = AgentopsJob.perform

    def perform(job: AgentopsJob) -> Any:
        started = [str(i).split(":")[0] for i in StartedJobRegistry(queue=queue).get_job_ids()]
        seen.append(
            {
                "status": job.get_status(refresh=True),
                "started": started == [job.id],
                "executions": len(job.get_executions()),
                "queued": len(queue),
                "intermediate": connection.lrange(queue.intermediate_queue_key, 0, -1),
                "worker_state": connection.hget(f"rq:worker:{job.worker_name}", "state"),
                "ttl": connection.ttl(job.key),
                "ids": job.id,
            }
        )
        return real_perform(job)

    monkeypatch.setattr(AgentopsJob, "perform", perform)

    def per_ring(name: str) -> float:
        jobs = [queue.enqueue(DELIVER_JOB, i, result_ttl=0, job_timeout=60) for i in range(10)]
        worker = AgentopsWorker([queue], connection=connection, name=f"{name}-{os.getpid()}")
        before = sends[0]
        worker.work(burst=True)
        assert [s.pop("ids") for s in seen[-len(jobs) :]] == [j.id for j in jobs]
        return (sends[0] - before) / len(jobs)

    with monkeypatch.context() as rqs_way:
        rqs_way.setattr(AgentopsWorker, "prepare_execution", SimpleWorker.prepare_execution)
        rq_starts = per_ring("rq")
    rq_seen = seen[:]
    we_start = per_ring("lean")
    ours = seen[len(rq_seen) :]
    for during in (rq_seen[0], ours[0]):
        assert during["status"] == JobStatus.STARTED
        assert during["executions"] == 1
        assert during["started"]
        assert during["worker_state"] in (b"busy", "busy")
        assert during["intermediate"] == []
        assert during["ttl"] == -1  # kept while it runs
    assert ours == rq_seen  # the same, job after job
    assert we_start <= rq_starts - 1, (we_start, rq_starts)


@pytest.mark.parametrize("level", ["WARNING", "INFO"])
def test_rqs_own_lines_are_written_at_the_operators_log_level(level: str) -> None:
    """django-rq's command asks RQ for INFO (its verbosity's level), which RQ sets on its
    worker's logger: a worker started with LOG_LEVEL=WARNING would still write a few lines a
    job. The worker takes LOG_LEVEL instead."""
    import logging

    from django.test import override_settings

    queue = django_rq.get_queue("default", serializer=JSONSerializer)
    worker = AgentopsWorker([queue], connection=queue.connection, name=f"level-{os.getpid()}")
    with override_settings(LOG_LEVEL=level):
        worker.work(burst=True, logging_level="DEBUG")
        assert logging.getLogger("rq.worker").level == getattr(logging, level)
        logging.getLogger("rq.worker").setLevel(logging.DEBUG)
        worker.work(True, "DEBUG")  # by place
        assert logging.getLogger("rq.worker").level == getattr(logging, level)


def test_a_worker_that_stops_listening_ends_at_once_not_after_its_wait_for_commands() -> None:
    """The order that made a worker's end take a minute: its command thread reads the
    unsubscribe before it is told to stop, and then waits for a subscription that will not
    come, as long as it waits for a message at a time."""
    connection = django_rq.get_connection("default")
    queue = Queue(f"listen-{os.getpid()}", connection=connection, serializer=JSONSerializer)
    worker = AgentopsWorker([queue], connection=connection, name=f"listen-{uuid.uuid4().hex}")
    worker.subscribe()
    pubsub = worker.pubsub
    assert pubsub is not None
    wait_until(lambda: pubsub.subscribed, what="the subscription", timeout=10)
    pubsub.unsubscribe()
    # Read by the thread, which now waits for a subscription.
    wait_until(lambda: not pubsub.subscribed, what="the unsubscribe read", timeout=10)
    began = time.monotonic()
    worker.unsubscribe()
    took = time.monotonic() - began
    assert worker.pubsub_thread is not None and not worker.pubsub_thread.is_alive()
    assert took < 10 * worker.pubsub_wait_seconds, took
