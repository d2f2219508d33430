"""The primary dies in the middle of charges; Patroni promotes the synchronous standby (issue 36).

A real cluster (devtools/cluster: etcd and two Patroni nodes over the project's PostgreSQL),
migrated as production is; a real RQ worker and the sweeper, connected through the multi-host
DATABASE_URL as the worker role, and gunicorn with the production settings as the web role;
renewals charging through the `stripe` library against the payments sandbox. The leader's
Patroni and postmaster are killed (SIGKILL) once some charges have settled, one is in flight
and others are still to come. Then:

- every task finishes;
- each invoice was charged exactly once (the payments sandbox's ledger);
- no step that the primary had shown committed before it died is missing or changed after
  the failover (with synchronous replication a commit is visible only once the standby has
  it);
- the web server answered 503 with a sentence and Retry-After meanwhile, never a 500, and as
  before once the new primary took over;
- the time from the primary's death to the next committed step is measured and printed.

This test does not touch the test run's own database: everything it reads, it reads from the
cluster.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentops.unavailable import SENTENCE
from agentops.workers import WORKER_ARGS
from devtools.cluster import Cluster, patronictl_list
from devtools.process import (
    REPO,
    Popen,
    ProcessError,
    accepts_tcp,
    end,
    free_port,
    spawn,
    wait_until,
)
from devtools.stack.postgres import APP_ROLE, DATABASE_ROLES, OWNER_ROLE, WEB_ROLE, WORKER_ROLE
from tests.agentops.sandboxed import sandbox_settings
from tests.sandbox.fixtures import SandboxHandle

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

TASKS = 12
# Each charge is in flight this long at the provider, so the run is still charging when the
# primary dies.
CHARGE_LATENCY = 0.3
# Killed once this many charges are settled.
KILL_AFTER = 3
# Generous: a failover takes about Patroni's ttl (10 s); a task a second or so.
FINISH_TIMEOUT = 150.0
MIGRATE_TIMEOUT = 180.0
# How often the web server is asked while the test runs.
PROBE_INTERVAL = 0.2


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with Cluster.running() as running:
        yield running


def _env(cluster: Cluster, role: str, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentops.settings_test",
        "DATABASE_ROLES": DATABASE_ROLES,
        "DATABASE_URL": cluster.url(role=role),
        "PYTHONUNBUFFERED": "1",
        **extra,
    }
    for name in (
        "DATABASE_OWNER_URL",
        "DATABASE_WEB_URL",
        "DATABASE_WORKER_URL",
        "AGENTOPS_DEVTOOLS",
        "AGENTOPS_TOOL_WRAPPERS",
        "AGENTOPS_CHAOS_KILL",
        "DJANGO_ALLOW_ASYNC_UNSAFE",
    ):
        if name not in extra:
            env.pop(name, None)
    return env


def _manage(env: dict[str, str], *argv: str, timeout: float, log: Path) -> str:
    """``manage.py argv`` to its end; its standard output (its log to `log`)."""
    with log.open("ab") as err:
        result = subprocess.run(  # noqa: S603 - our own manage.py
            [sys.executable, "manage.py", *argv],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            timeout=timeout,
            check=False,
        )
    if result.returncode != 0:
        raise AssertionError(
            f"manage.py {' '.join(argv)} exited {result.returncode}:\n{log.read_text()[-3000:]}"
        )
    return result.stdout.decode()


class Observer:
    """Reads the cluster as its owner through the multi-host URL, a new connection each time
    (a connection to the old primary dies with it); None while no primary answers."""

    def __init__(self, cluster: Cluster) -> None:
        self.url = cluster.url(role=OWNER_ROLE)

    def rows(self, query: str, params: Any = None) -> list[tuple[Any, ...]] | None:
        try:
            with psycopg.connect(self.url, connect_timeout=2, autocommit=True) as conn:
                return conn.execute(query, params).fetchall()
        except psycopg.OperationalError:
            return None

    def steps(self) -> dict[str, str] | None:
        """Every step's id and state, as committed."""
        rows = self.rows("SELECT id::text, state FROM journal_step")
        return None if rows is None else {str(i): str(s) for i, s in rows}


def worker_saw(log: Path) -> dict[str, str]:
    """Each step the worker logged a committed move of, by its key: the state it saw it
    settled in ("" if it saw it recorded only)."""
    seen: dict[str, str] = {}
    for line in log.read_text().splitlines():
        try:
            fields = json.loads(line)
        except ValueError:
            continue
        if not isinstance(fields, dict) or "step_key" not in fields:
            continue
        key = str(fields["step_key"])
        if fields.get("event") == "settled":
            seen[key] = str(fields.get("state", ""))
        else:
            seen.setdefault(key, "")
    return seen


class WebProbe(threading.Thread):
    """Asks the web server, over HTTP, for the API (with a token it does not know) and a page
    (with a session it does not know), again and again until stopped: each answer's time,
    status and what a 503 said."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.answers: list[dict[str, Any]] = []
        self.stopped = threading.Event()

    def _get(self, path: str, **headers: str) -> tuple[int, str, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", path, headers={"Host": "127.0.0.1", **headers})
            reply = conn.getresponse()
            return reply.status, reply.getheader("Retry-After") or "", reply.read().decode()
        except OSError as error:
            return 0, "", str(error)
        finally:
            conn.close()

    def run(self) -> None:
        while not self.stopped.is_set():
            api = self._get("/api/v1/tasks", Authorization="Bearer ao_live_unknown")
            page = self._get("/", Cookie="sessionid=" + "x" * 32)
            self.answers.append({"at": time.monotonic(), "api": api, "page": page})
            self.stopped.wait(PROBE_INTERVAL)

    def stop(self) -> list[dict[str, Any]]:
        self.stopped.set()
        self.join(timeout=60)
        return self.answers


def compress(statuses: list[int]) -> str:
    """``401×3, 503×40, 401×1``."""
    runs: list[list[int]] = []
    for status in statuses:
        if runs and runs[-1][0] == status:
            runs[-1][1] += 1
        else:
            runs.append([status, 1])
    return ", ".join(f"{s}×{n}" for s, n in runs)


START_SCRIPT = """
import json
from agentops.effects import task_start
ids = []
for inv in json.loads({invoices!r}):
    task = task_start(
        kind="renewal",
        goal=f"Renew the subscription: charge {{inv}}, email the receipt",
        refs={{"invoice": inv, "amount": 4900, "currency": "usd", "email": "ada@example.com"}},
    )
    ids.append(str(task.pk))
print("TASKS " + json.dumps(ids))
"""


def migrated(
    cluster: Cluster,
    payments: SandboxHandle,
    mail: SandboxHandle,
    bookings: SandboxHandle,
    tmp_path: Path,
) -> dict[str, str]:
    """The cluster migrated as production is, this run's Redis emptied of other tests' jobs
    (they name tasks of another database); returns the tools' settings its processes get."""
    import django_rq

    django_rq.get_connection("default").flushdb()
    tools = {k: str(v) for k, v in sandbox_settings(payments, mail, bookings).items()}
    # The tools' settings as the fleet of tests/agentops/workers.py has them: short calls,
    # within the tests' two-second lease (a start-up check of every command).
    tools["TOOL_TIMEOUT_SECONDS"] = "0.5"
    _manage(
        _env(cluster, APP_ROLE, DATABASE_OWNER_URL=cluster.url(role=OWNER_ROLE), **tools),
        "migrate",
        "-v0",
        timeout=MIGRATE_TIMEOUT,
        log=tmp_path / "migrate.log",
    )
    return tools


def test_the_primary_killed_mid_charges_loses_no_commit_and_repeats_no_charge(
    cluster: Cluster,
    payments_sandbox: SandboxHandle,
    mail_sandbox: SandboxHandle,
    bookings_sandbox: SandboxHandle,
    clean_faults: None,
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    tools = migrated(cluster, payments_sandbox, mail_sandbox, bookings_sandbox, tmp_path)
    print(f"cluster migrated in {time.monotonic() - started:.1f}s")
    payments_sandbox.client.fault(
        "payment_intents.create", "latency_before_effect", delay=CHARGE_LATENCY, times=None
    )
    web_env = _env(
        cluster,
        WEB_ROLE,
        **tools,
        DJANGO_SETTINGS_MODULE="agentops.settings",
        DJANGO_DEBUG="0",
        DJANGO_HTTPS="0",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DJANGO_STATIC_ROOT=str(tmp_path / "static"),
    )
    worker_env = _env(
        cluster,
        WORKER_ROLE,
        **tools,
        RECONCILE_SCHEDULE="0.2,0.3,0.5,0.5,1,1,2,2,2",
        SWEEP_GRACE_SECONDS="1",
    )
    procs: list[Popen] = []
    probe: WebProbe | None = None
    try:
        procs.append(
            spawn(
                [sys.executable, "manage.py", *WORKER_ARGS],
                env=worker_env,
                output=tmp_path / "worker.log",
            )
        )
        procs.append(
            spawn(
                [sys.executable, "manage.py", "sweep", "--interval", "0.3"],
                env=worker_env,
                output=tmp_path / "sweeper.log",
            )
        )
        # The web server as production runs it (gunicorn, DEBUG off, the web role), asked
        # over HTTP from before the kill to the end.
        subprocess.run(  # noqa: S603 - our own manage.py
            [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"],
            cwd=REPO,
            env=web_env,
            check=True,
            timeout=120,
        )
        web_port = free_port()
        web = spawn(
            [sys.executable, "-m", "gunicorn", "-c", "python:agentops.gunicorn_conf"]
            + ["--bind", f"127.0.0.1:{web_port}", "--workers", "1"],
            env=web_env,
            output=tmp_path / "web.log",
        )
        procs.append(web)
        wait_until(lambda: accepts_tcp(web_port), what="gunicorn", timeout=60, proc=web)
        probe = WebProbe(web_port)
        probe.start()
        invoices = [f"INV-{uuid.uuid4().hex[:10]}" for _ in range(TASKS)]
        out = _manage(
            _env(cluster, WEB_ROLE, **tools),
            "shell",
            "-c",
            START_SCRIPT.format(invoices=json.dumps(invoices)),
            timeout=120,
            log=tmp_path / "start.log",
        )
        task_ids = json.loads(out.split("TASKS ", 1)[1])
        assert len(task_ids) == TASKS

        observer = Observer(cluster)
        # Killed in the middle of the charges: some settled, one in flight at the provider
        # (recorded, its outcome not yet committed), others still to come.
        in_flight = (
            "SELECT count(*) FILTER (WHERE state = 'done'), "
            "count(*) FILTER (WHERE state = 'pending') "
            "FROM journal_step WHERE tool = 'charge_customer'"
        )

        def mid_charges() -> bool:
            rows = observer.rows(in_flight)
            return rows is not None and rows[0][0] >= KILL_AFTER and rows[0][1] >= 1

        wait_until(
            mid_charges,
            what=f"{KILL_AFTER} charges settled and one in flight",
            timeout=FINISH_TIMEOUT,
            proc=procs[0],
        )
        before = observer.steps()
        assert before is not None
        dead = cluster.kill_primary()
        killed_at = time.monotonic()
        done_before = sum(1 for state in before.values() if state == "done")
        pending_before = sum(1 for state in before.values() if state == "pending")

        # The next step committed after the primary's death: a new step, or one settled.
        def next_commit() -> bool:
            now = observer.steps()
            return now is not None and any(before.get(i) != s for i, s in now.items())

        wait_until(next_commit, what="a step committed after the failover", timeout=90)
        recovered = time.monotonic() - killed_at
        leader = cluster.wait_for_leader(other_than=dead, timeout=30)
        print(
            f"primary {dead.name} killed with {done_before} steps done, {pending_before} in "
            f"flight ({len(before)} recorded); the next step committed {recovered:.1f}s later, "
            f"on {leader.name}\n{patronictl_list(leader)}"
        )

        def all_ended() -> bool:
            rows = observer.rows(
                "SELECT count(*) FROM journal_task WHERE id::text = ANY(%s) "
                "AND status IN ('finished', 'needs_human')",
                [task_ids],
            )
            return rows is not None and int(rows[0][0]) == TASKS

        try:
            wait_until(all_ended, what="every task to end", timeout=FINISH_TIMEOUT)
        except ProcessError:
            tail = (tmp_path / "worker.log").read_text()[-4000:]
            raise AssertionError(f"not every task ended; the worker's log ends:\n{tail}") from None

        # Meanwhile the web server said 503 with a sentence and Retry-After, never a 500 nor
        # a traceback, and answered as before once the new primary took over: the API 401 (a
        # token it does not know), a page a redirect to the login (a session it does not know).
        answers = probe.stop()
        api = [a["api"][0] for a in answers]
        page = [a["page"][0] for a in answers]
        print(f"the web server answered {compress(api)} (API) and {compress(page)} (a page)")
        assert set(api) == {401, 503} and set(page) == {302, 503}, answers[-5:]
        assert (api[0], page[0], api[-1], page[-1]) == (401, 302, 401, 302)
        for answer in answers:
            for side in ("api", "page"):
                status, retry_after, body = answer[side]
                if status == 503:
                    assert retry_after == "10", answer
                    assert SENTENCE in (json.loads(body)["detail"] if side == "api" else body)
                    assert "Traceback" not in body
        unavailable = [a["at"] for a in answers if 503 in (a["api"][0], a["page"][0])]
        web_back = max(unavailable) - killed_at
        print(
            f"the web server answered 503 from {min(unavailable) - killed_at:.1f}s to "
            f"{web_back:.1f}s after the primary's death"
        )

        statuses = observer.rows(
            "SELECT id::text, status, failed_runs FROM journal_task WHERE id::text = ANY(%s)",
            [task_ids],
        )
        assert statuses is not None
        assert {s for _, s, _ in statuses} == {"finished"}, statuses
        # A run that lost its database counts as a run that did not end cleanly, one of the
        # MAX_FAILED_RUNS (5) in a row a task may have before it needs a person: the failover
        # cost each task at most one.
        lost_runs = [f for _, _, f in statuses]
        assert max(lost_runs) <= 1, statuses
        print(f"runs lost to the failover: {sum(lost_runs)} (at most one a task)")
        refused = observer.rows(
            "SELECT key, refusal FROM journal_step WHERE task_id::text = ANY(%s) AND refusal > ''",
            [task_ids],
        )
        assert refused == [], refused

        # Nothing the primary showed committed before it died is missing or changed after.
        after = observer.steps()
        assert after is not None
        missing = {i for i in before if i not in after}
        assert not missing, f"steps committed before the failover are gone: {missing}"
        settled_before = {i: s for i, s in before.items() if s != "pending"}
        changed = {i: (s, after[i]) for i, s in settled_before.items() if after[i] != s}
        assert not changed, f"steps settled before the failover changed: {changed}"

        # Nothing the worker saw committed is missing either: it logs what each move did once
        # the move returned (agentops/telemetry/steps.py), a run that lost its database
        # included (what returned before the loss).
        seen = worker_saw(tmp_path / "worker.log")
        assert seen, "the worker logged no step"
        keys = observer.rows(
            "SELECT key, state FROM journal_step WHERE task_id::text = ANY(%s)", [task_ids]
        )
        assert keys is not None
        final = dict(keys)
        lost = {k: s for k, s in seen.items() if k not in final}
        assert not lost, f"steps the worker saw committed are gone: {lost}"
        unsettled = {k: (s, final[k]) for k, s in seen.items() if s and final[k] != s}
        assert not unsettled, f"steps the worker saw settled are not so now: {unsettled}"

        # Exactly one charge per invoice, as the provider's ledger has it: every charge made
        # for the invoice (its metadata names it), whatever key it came with.
        made = payments_sandbox.client.ledger(operation="payment_intents.create")
        charges = {inv: [e for e in made if inv in json.dumps(e.get("params"))] for inv in invoices}
        counts = {inv: len(entries) for inv, entries in charges.items()}
        assert counts == dict.fromkeys(invoices, 1), counts
        print(
            f"{TASKS} renewals finished, one charge each; "
            f"recovery after the primary's death: {recovered:.1f}s"
        )
    finally:
        if probe is not None:
            probe.stop()
        end(*procs, timeout=10, signum=signal.SIGKILL)
