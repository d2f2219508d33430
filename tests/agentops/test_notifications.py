"""Notifications out (issue 20): the agent builder's endpoint told of a task's status changes,
each delivery a CHEAP effect of agentops — keyed, retried while its key lives, never looked
up, three states (agentops/notifications).

The receiver is an HTTP server in the test's thread that does what a careful receiver does:
it checks the signature, deduplicates by ``Idempotency-Key``, and answers 200 with its own id.
It misbehaves as each test scripts it, per key. Attempts run in process (``delivery_attempt``,
the job's service) or on real RQ workers with RQ's scheduler; real PostgreSQL and Redis.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import django_rq
import pytest
import redis
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection, transaction
from django.db.models import Max
from django.db.models.functions import Now
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext

from agentops.api.selectors import task_out
from agentops.notifications import gauges, services
from agentops.notifications.models import Delivery, DeliveryCursor, DeliveryState
from agentops.notifications.signing import HEADER, signature, verify
from agentops.telemetry import instruments
from agentops.workers import WORKER_ARGS, AgentopsWorker
from devtools.database import database_url
from devtools.process import Popen, end, free_port, spawn
from journal.leases import lease_acquire
from journal.models import Attention, Entry, Task
from journal.operator import task_resume
from journal.record import task_create
from journal.run import task_advance
from journal.status import task_flag
from tests.agentops.workers import quiet_world
from tests.journal.support import ScriptedPlanner, invoice
from tests.sandbox.fixtures import wait_for

pytestmark = pytest.mark.usefixtures("committed")

SECRET = "whsec_test_" + "n" * 32


# --- The receiver -----------------------------------------------------------------------------


@dataclass
class Request:
    key: str
    event: str
    body: bytes
    signature: str
    verified: bool
    answer: str


@dataclass
class Receiver:
    """The agent builder's endpoint. ``faults`` are per key: the first request of each key
    gets ``faults[0]``, the second ``faults[1]``, then it behaves.

    - ``close``: down behind its proxy: the connection closes before anything is processed;
    - ``503``: down, saying so;
    - ``drop``: it processes the notification, and the connection drops before the 200;
    - ``slow``: it processes it, then takes ``slow_seconds`` to answer.

    A request whose signature does not verify gets 401 and is not processed.
    """

    secret: str = SECRET
    faults: list[str] = field(default_factory=list)
    slow_seconds: float = 3.0
    seen: list[Request] = field(default_factory=list)
    processed: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def of(self, key: str) -> list[Request]:
        with self.lock:
            return [r for r in self.seen if r.key == key]

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        key = handler.headers.get("Idempotency-Key", "")
        header = handler.headers.get(HEADER, "")
        verified = verify(secret=self.secret, header=header, body=body)
        with self.lock:
            nth = sum(1 for r in self.seen if r.key == key)
            fault = self.faults[nth] if nth < len(self.faults) else ""
            if fault in ("close", "503") or not verified:
                answer = fault or "401"
            else:
                answer = "duplicate" if key in self.processed else "processed"
                self.processed.setdefault(key, f"rcv_{len(self.processed) + 1}")
            request = Request(
                key, handler.headers.get("Agentops-Event", ""), body, header, verified, answer
            )
            self.seen.append(request)
        if fault == "close" or (fault == "drop" and verified):
            handler.close_connection = True
            return  # no status line: the client sees the connection end without an answer
        if not verified:
            return self._answer(handler, 401, {"error": {"message": "bad signature"}})
        if fault == "503":
            return self._answer(handler, 503, {"error": {"message": "down for maintenance"}})
        if fault == "slow":
            time.sleep(self.slow_seconds)
        self._answer(handler, 200, {"id": self.processed[key], "duplicate": answer == "duplicate"})

    @staticmethod
    def _answer(handler: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
        raw = json.dumps(body).encode()
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(raw)))
            handler.end_headers()
            handler.wfile.write(raw)
        except OSError:
            pass  # its caller was killed meanwhile


@contextlib.contextmanager
def receiving() -> Iterator[Receiver]:
    """A receiver of notifications on a free port, for as long as the block lasts."""
    rcv = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            rcv.handle(self)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    rcv.url = f"http://127.0.0.1:{server.server_port}/hooks/agentops"
    try:
        yield rcv
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as rcv:
        yield rcv


def notify_settings(url: str, **more: Any) -> dict[str, Any]:
    return {
        "NOTIFY_URL": url,
        "NOTIFY_SECRET": SECRET,
        "NOTIFY_EVENTS": ("needs_human", "awaiting_approval", "finished", "compensated"),
        "NOTIFY_RETRY_SCHEDULE": (0.2,),
        "NOTIFY_KEY_LIFETIME_SECONDS": 3600.0,
        "NOTIFY_TIMEOUT_SECONDS": 1.0,
        **more,
    }


@contextlib.contextmanager
def notifying_world() -> Iterator[Any]:
    """An empty Redis, no task left advancing by earlier tests, and the notifications cursor
    moved past everything earlier tests did (they ran with notifications off), and no
    delivery of theirs left open."""
    conn = quiet_world()
    # Deliveries earlier tests left open are given up, as their tasks were parked.
    Delivery.objects.filter(settled_at__isnull=True).update(
        state=DeliveryState.UNKNOWN,
        next_attempt_at=None,
        settled_at=Now(),
        detail="given up by the test suite",
    )
    top = Entry.objects.aggregate(top=Max("id"))["top"] or 0
    DeliveryCursor.objects.update_or_create(
        pk=1, defaults={"safe_entry_id": top, "seen_entry_id": None, "seen_xmax": None}
    )
    try:
        yield conn
    finally:
        conn.flushdb()


@pytest.fixture
def world() -> Iterator[Any]:
    with notifying_world() as conn:
        yield conn


# --- Events, as the journal makes them --------------------------------------------------------


def new_task() -> Task:
    return task_create(kind="renewal", goal="renew", refs={"invoice": invoice()})


def flag(task: Task) -> None:
    """Its runner hands it to a person, on this thread's connection (in its transaction, if
    one is open)."""
    lease = lease_acquire(task_id=task.pk, owner="test")
    assert lease is not None
    task_flag(lease=lease, code=Attention.PARKED, reason="a person should look", release=True)


def finish(task: Task) -> None:
    """The task's runner decides it is over (a planner with nothing left to do)."""
    assert task_advance(task_id=task.pk, planner=ScriptedPlanner([]), tools={}).stopped == (
        "finished"
    )


def deliveries(task: Task) -> list[Delivery]:
    return list(Delivery.objects.filter(task=task).order_by("id"))


def due_now(delivery: Delivery, timeout: float = 10.0) -> None:
    wait_for(
        lambda: Delivery.objects.filter(pk=delivery.pk, next_attempt_at__lte=Now()).exists(),
        timeout=timeout,
        what=f"delivery {delivery.key} to be due",
    )


def attempted_until_settled(delivery_id: int, timeout: float = 20.0) -> Delivery:
    """Attempt the delivery whenever it is due, as its jobs would, until it stops."""
    deadline = time.monotonic() + timeout
    while Delivery.objects.filter(pk=delivery_id, settled_at__isnull=True).exists():
        assert time.monotonic() < deadline, "the delivery was never settled or given up"
        services.delivery_attempt(delivery_id=delivery_id)
        time.sleep(0.05)
    return Delivery.objects.get(pk=delivery_id)


def operator_client() -> Client:
    who = get_user_model().objects.create_user(
        username=f"op-{uuid.uuid4().hex[:8]}", password="a-Long-enough-pass-1"
    )
    who.groups.add(Group.objects.get(name="Operators (read-only)"))
    client = Client()
    client.force_login(who)
    return client


def counted(event: str, outcome: str) -> float:
    return float(instruments.NOTIFICATIONS.labels(event=event, outcome=outcome)._value.get())


# --- Workers ----------------------------------------------------------------------------------


@dataclass
class Workers:
    env: dict[str, str]
    logs: Path
    procs: list[Popen] = field(default_factory=list)

    def start(self) -> Popen:
        log = self.logs / f"worker-{len(self.procs)}.log"
        argv = [sys.executable, "manage.py", *WORKER_ARGS]
        proc = spawn(argv, env=self.env, output=log)
        self.procs.append(proc)
        return proc


@pytest.fixture
def workers(world: Any, receiver: Receiver, tmp_path: Path) -> Iterator[Workers]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentops.settings_test",
        "DATABASE_URL": database_url(),
        "PYTHONUNBUFFERED": "1",
        # Shorter than the tests' lease, as the system checks require of a worker.
        "TOOL_TIMEOUT_SECONDS": "0.5",
        "NOTIFY_URL": receiver.url,
        "NOTIFY_SECRET": SECRET,
        "NOTIFY_RETRY_SCHEDULE": "0.2",
        "NOTIFY_TIMEOUT_SECONDS": "1",
    }
    for name in ("AGENTOPS_DEVTOOLS", "AGENTOPS_TOOL_WRAPPERS", "DATABASE_OWNER_URL"):
        env.pop(name, None)
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    fleet = Workers(env, tmp_path)
    yield fleet
    end(*fleet.procs, timeout=30, signum=signal.SIGKILL)
    for log in sorted(tmp_path.glob("worker-*.log")):  # shown when the test failed
        print(f"--- {log.name}\n{log.read_text()[-4000:]}")


def run_queued_jobs() -> None:
    """Run what the queue holds now, in this process, as a worker would."""
    queue = django_rq.get_queue("default")
    AgentopsWorker([queue], connection=queue.connection).work(burst=True)


# --- The tests --------------------------------------------------------------------------------


def test_a_receiver_down_for_two_attempts_gets_each_event_once_signed_and_the_task_shows_it(
    workers: Workers, receiver: Receiver
) -> None:
    receiver.faults = ["close", "503"]
    workers.start()
    task = new_task()
    with override_settings(**notify_settings(receiver.url)):
        flag(task)
        task_resume(task_id=task.pk, actor="ops:ada", reason="looked")
        finish(task)
        # The worker's doorbell after a run; here the test rings, as the sweeper would.
        assert len(services.notifications_derive()) == 2
        assert services.notifications_derive() == []  # derived once
        wait_for(
            lambda: all(d.state == DeliveryState.DONE for d in deliveries(task)),
            timeout=30,
            what="both notifications to be delivered",
        )
        flagged, finished = deliveries(task)
        for d, event in ((flagged, "needs_human"), (finished, "finished")):
            assert d.event == event
            entry = Entry.objects.get(pk=d.entry_id)
            assert d.key == f"ao:notify:{task.pk}:{entry.pk}"
            sent = receiver.of(d.key)
            # Down twice, then delivered: three attempts, one key, one body, each signed.
            assert [r.answer for r in sent] == ["close", "503", "processed"]
            assert d.attempts == 3 and d.last_status == 200
            assert d.evidence == {"status": 200, "id": receiver.processed[d.key]}
            assert len({r.body for r in sent}) == 1 and all(r.verified for r in sent)
            body = json.loads(sent[0].body)
            assert body["id"] == d.key and body["event"] == f"task.{event}"
            assert body["task"]["id"] == str(task.pk) and body["task"]["status"] == event
            assert [r.event for r in sent] == [f"task.{event}"] * 3
        assert json.loads(receiver.of(flagged.key)[0].body)["code"] == "parked"
        assert "summary" in json.loads(receiver.of(finished.key)[0].body)
        # Exactly one delivery per event key reached the receiver's system.
        assert len(receiver.processed) == 2

        page = operator_client().get(f"/tasks/{task.pk}").content.decode()
        for d in (flagged, finished):
            row = page.split(f'id="delivery-{d.pk}"')[1].split("</tr>")[0]
            assert d.key in row and ">done<" in row and ">3<" in row
            assert f"HTTP 200, id <code>{d.evidence['id']}</code>" in row
        read = task_out(task_id=task.pk).notifications
        assert [(n.event, n.key, n.state, n.attempts) for n in read] == [
            ("needs_human", flagged.key, "done", 3),
            ("finished", finished.key, "done", 3),
        ]


# --- Sagas: held for a person, and compensated ---------------------------------------------


def test_a_reply_lost_after_the_receiver_acted_is_sent_again_with_the_same_key(
    world: Any, receiver: Receiver
) -> None:
    receiver.faults = ["drop"]
    task = new_task()
    with override_settings(**notify_settings(receiver.url)):
        flag(task)
        (delivery_id,) = services.notifications_derive()
        assert services.delivery_attempt(delivery_id=delivery_id) == "unknown"
        d = Delivery.objects.get(pk=delivery_id)
        assert d.state == DeliveryState.UNKNOWN and d.settled_at is None
        assert "interrupted" in d.detail
        due_now(d)
        assert services.delivery_attempt(delivery_id=delivery_id) == "done"
    sent = receiver.of(d.key)
    # It acted on the first; the second carried the same key and body, and it could tell.
    assert [r.answer for r in sent] == ["processed", "duplicate"]
    assert sent[0].body == sent[1].body and all(r.verified for r in sent)
    assert list(receiver.processed) == [d.key]
    d.refresh_from_db()
    assert d.state == DeliveryState.DONE and d.attempts == 2


def test_a_401_is_not_retried_and_is_shown_as_ours_to_fix(
    world: Any, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.secret = "whsec_the_receivers_own_" + "x" * 20  # not the one agentops signs with
    task = new_task()
    before = counted("needs_human", "misconfigured")
    with override_settings(**notify_settings(receiver.url)):
        flag(task)
        (delivery_id,) = services.notifications_derive()
        assert services.delivery_attempt(delivery_id=delivery_id) == "not_done"
        time.sleep(0.3)  # past the retry delay: nothing is due, nothing is rung for
        assert services.notifications_sweep() == 0
        assert services.delivery_attempt(delivery_id=delivery_id) == "not_due"
        page = operator_client().get(f"/tasks/{task.pk}").content.decode()
    d = Delivery.objects.get(pk=delivery_id)
    assert len(receiver.of(d.key)) == 1 and receiver.processed == {}
    assert d.state == DeliveryState.NOT_DONE and d.misconfigured and d.last_status == 401
    assert d.settled_at is not None and d.next_attempt_at is None
    assert "refused our request, not the action" in d.detail
    assert counted("needs_human", "misconfigured") == before + 1
    assert any(r.levelname == "ERROR" and d.key in r.getMessage() for r in caplog.records)
    row = page.split(f'id="delivery-{d.pk}"')[1].split("</tr>")[0]
    assert "ours to fix" in row and "NOTIFY_SECRET" in row and "HTTP 401" in row


def test_without_a_notify_url_nothing_is_recorded_or_sent(world: Any, receiver: Receiver) -> None:
    task = new_task()
    with override_settings(**notify_settings("")):
        flag(task)
        finish_me = new_task()
        finish(finish_me)
        assert services.notifications_derive() == []
        assert services.notifications_sweep() == 0
    assert deliveries(task) == [] and deliveries(finish_me) == []
    assert receiver.seen == []


def test_a_lost_ring_and_a_worker_killed_mid_call_still_deliver_once(
    workers: Workers, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = new_task()
    with override_settings(**notify_settings(receiver.url)):
        flag(task)  # committed; the process that did it rang for nothing (it died, say)

        # The sweeper derives it, and its ring is lost: Redis refuses.
        class Gone:
            def enqueue(self, *args: Any, **kwargs: Any) -> None:
                raise redis.ConnectionError("Redis is away")

        with monkeypatch.context() as patch:
            patch.setattr(services, "run_queue", lambda: Gone())
            (delivery_id,) = services.notifications_derive()
        assert receiver.seen == []
        d = Delivery.objects.get(pk=delivery_id)
        assert d.state == DeliveryState.QUEUED and d.attempts == 0

        # The next sweep rings for it (due, and nobody rang); a worker takes it, and is
        # killed while the receiver acts and before it answers.
        receiver.faults = ["slow"]
        doomed = workers.start()
        assert services.notifications_sweep() == 1
        wait_for(lambda: receiver.of(d.key), timeout=30, what="the first attempt to arrive")
        os.killpg(doomed.pid, signal.SIGKILL)
        d.refresh_from_db()
        assert d.state == DeliveryState.SENDING and d.attempts == 1

        # Its claim lapses; the sweeper rings again, and another worker sends it again.
        due_now(d)
        assert services.notifications_sweep() == 1
        run_queued_jobs()
    d.refresh_from_db()
    assert d.state == DeliveryState.DONE and d.attempts == 2
    assert [r.answer for r in receiver.of(d.key)] == ["processed", "duplicate"]
    assert list(receiver.processed) == [d.key]
    with override_settings(**notify_settings(receiver.url)):
        assert services.notifications_sweep() == 0


def test_an_entry_committed_after_a_later_one_was_derived_is_still_derived(
    world: Any, receiver: Receiver
) -> None:
    """Entry ids are not in commit order: the cursor must not pass an id whose transaction
    was still open when it looked."""
    early, late = new_task(), new_task()
    flagged, release = threading.Event(), threading.Event()

    def slow_transaction() -> None:
        try:
            with transaction.atomic():
                flag(early)  # draws its entry id now...
                flagged.set()
                # ...and commits after `late` was derived, never idle for a whole lease (the
                # test settings end a session idle in a transaction that long).
                deadline = time.monotonic() + 20
                while not release.wait(timeout=0.2) and time.monotonic() < deadline:
                    with connection.cursor() as cursor:
                        cursor.execute("SELECT 1")
        finally:
            connection.close()

    with override_settings(**notify_settings(receiver.url)):
        thread = threading.Thread(target=slow_transaction)
        thread.start()
        assert flagged.wait(timeout=10)
        flag(late)
        first = services.notifications_derive()
        assert [d.task_id for d in Delivery.objects.filter(pk__in=first)] == [late.pk]
        assert Entry.objects.filter(task=early).count() == 1  # its flag is not visible yet
        second = services.notifications_derive()  # still open: nothing new, nothing skipped
        assert second == []
        release.set()
        thread.join(timeout=10)
        third = services.notifications_derive()
        assert [d.task_id for d in Delivery.objects.filter(pk__in=third)] == [early.pk]
        early_entry = Entry.objects.filter(task=early, kind="task_flagged").get()
        late_entry = Entry.objects.filter(task=late, kind="task_flagged").get()
        assert early_entry.pk < late_entry.pk
        # And the safe mark moves on once no transaction from before is open.
        services.notifications_derive()
        assert DeliveryCursor.objects.get().safe_entry_id >= late_entry.pk


def test_unknown_until_the_key_dies_is_given_up_and_never_reached_is_not_done(
    world: Any, receiver: Receiver
) -> None:
    receiver.faults = ["503"] * 100
    unanswered, unreachable = new_task(), new_task()
    short = {"NOTIFY_KEY_LIFETIME_SECONDS": 1.5, "NOTIFY_RETRY_SCHEDULE": (0.3,)}
    with override_settings(**notify_settings(receiver.url, **short)):
        flag(unanswered)
        (first,) = services.notifications_derive()
        d = attempted_until_settled(first)
        page = operator_client().get(f"/tasks/{unanswered.pk}").content.decode()
    assert d.state == DeliveryState.UNKNOWN and d.gave_up and d.next_attempt_at is None
    assert d.attempts >= 2 and len(receiver.of(d.key)) == d.attempts
    assert {r.key for r in receiver.seen} == {d.key}
    assert "given up" in d.detail and "may have arrived" in d.detail
    assert "given up: it may have arrived" in page.split(f'id="delivery-{d.pk}"')[1]

    nobody = f"http://127.0.0.1:{free_port()}/hooks"  # nothing listens: refused, never sent
    with override_settings(**notify_settings(nobody, **short)):
        flag(unreachable)
        (second,) = services.notifications_derive()
        d = attempted_until_settled(second)
    assert d.state == DeliveryState.NOT_DONE and d.settled_at is not None
    assert d.detail.startswith("never delivered") and d.attempts >= 2


def test_the_signature_is_stripes_scheme_over_the_raw_body() -> None:
    body = b'{"id":"ao:notify:t:1"}'
    header = signature(secret=SECRET, body=body, timestamp=1_800_000_000)
    assert header.startswith("t=1800000000,v1=")
    assert verify(secret=SECRET, header=header, body=body, now=1_800_000_100)
    assert not verify(secret=SECRET, header=header, body=body + b" ", now=1_800_000_100)
    assert not verify(secret="another", header=header, body=body, now=1_800_000_100)
    assert not verify(secret=SECRET, header=header, body=body, now=1_800_000_000 + 301)
    rolled = f"{header},v1={'0' * 64}"
    assert verify(secret=SECRET, header=rolled, body=body, now=1_800_000_000)


def test_the_open_deliveries_gauge_reads_only_what_an_index_serves() -> None:
    with CaptureQueriesContext(connection) as queries:
        families = {f.name: f for f in gauges.notifications()}
    assert set(families) == {"agentops_notifications_open", "agentops_notification_overdue_seconds"}
    ours = [q["sql"] for q in queries.captured_queries if "agentops_notifications_" in q["sql"]]
    assert len(ours) == 1
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        try:
            cursor.execute(f"EXPLAIN {ours[0]}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("RESET enable_seqscan")
    assert "Seq Scan" not in plan, plan


def test_settings_that_would_send_unsigned_or_nowhere_are_refused_at_start() -> None:
    from agentops.notifications.checks import notify_settings as check

    def ids(**overrides: Any) -> set[str]:
        with override_settings(**{**notify_settings("https://hooks.example.com/ao"), **overrides}):
            return {m.id for m in check() if m.id}

    assert ids() == set()
    assert ids(NOTIFY_SECRET="") == {"agentops.E403"}
    assert ids(NOTIFY_EVENTS=("finished", "paid")) == {"agentops.E401"}
    assert ids(NOTIFY_URL="hooks.example.com") == {"agentops.E402"}
    assert ids(NOTIFY_RETRY_SCHEDULE=()) == {"agentops.E404"}
    assert ids(NOTIFY_URL="http://hooks.example.com/ao", DEBUG=False) == {"agentops.W401"}
    assert ids(NOTIFY_URL="", NOTIFY_SECRET="") == set()  # off: nothing to check


def test_the_docs_check_of_the_signature_accepts_agentops_signatures_and_nothing_else() -> None:
    """The few lines docs/operating/notifications.md gives receivers, run as written."""
    page = Path(__file__).resolve().parents[2] / "docs" / "operating" / "notifications.md"
    code = page.read_text().split("# Notifications", 1)[1].split("```python\n", 1)[1]
    code = code.split("```", 1)[0]
    scope: dict[str, Any] = {}
    exec(compile(code, str(page), "exec"), scope)  # noqa: S102 - our own docs' code
    signed = scope["agentops_signed"]
    body = services.payload_body({"id": "ao:notify:t:1", "event": "task.finished"})
    now = int(time.time())
    header = signature(secret=SECRET, body=body, timestamp=now)
    assert signed(SECRET, header, body)
    assert signed(SECRET, f"{header},v1={'0' * 64}", body)  # a secret being rolled
    assert not signed(SECRET, header, body + b" ")
    assert not signed("another secret", header, body)
    assert not signed(SECRET, signature(secret=SECRET, body=body, timestamp=now - 301), body)
    assert not signed(SECRET, header.split(",")[1], body)  # no time
