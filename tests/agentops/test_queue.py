"""A queue that runs only our jobs (issue 8), attacked with a local Redis client.

The embedded Redis requires a password; whoever has it still cannot make a worker run
anything but agentops' own jobs.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

import django_rq
import pytest
import redis
from rq.job import Job, JobStatus
from rq.queue import Queue
from rq.serializers import JSONSerializer

from agentops.workers import WORKER_ARGS, AgentopsJob, AgentopsWorker, JobRefused
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
