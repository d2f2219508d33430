"""Operating agentops (issue 20): /metrics, and logs that join up.

- /metrics is served to an allowed address or a token with ``metrics:read``, never to a
  foreign address, a wrong token, or a token without the scope;
- after a scripted run on a real worker against the sandboxes (a plain renewal, one whose
  charge goes unknown and is looked up, one refused by the guards while it waits, one the
  provider refuses as misdirected so a person must look, a trip that compensates), the
  counters moved by exactly what the journal says happened, and the gauges equal the
  database's counts: parsed with prometheus_client's own parser, from the worker's files
  (multiprocess mode);
- a provider's reports are counted as applied, unchanged or conflict once committed, and
  each delivery once by what became of it (applied, unchanged, conflict, ignored,
  duplicate, refused, failed);
- every query behind the gauges can be answered through an index;
- a worker's line about a step is one JSON object naming the task, the step's key, its tool
  and its state; so are the web server's (gunicorn's, for a request: a provider's notification
  settling a step) and the sweeper's (naming the task it rang for).

(The alert rules are tested by promtool in `make test`: deploy/prometheus/.)
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import uuid
from collections import Counter as Tally
from collections.abc import Iterator
from ipaddress import ip_network
from pathlib import Path
from typing import Any

import pytest
import requests
from django.db import OperationalError, connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from prometheus_client.parser import text_string_to_metric_families

import commerce.webhooks
from agentops.api.auth import api_client_create
from agentops.effects import task_start
from agentops.provider_events import provider_event_apply
from agentops.telemetry import collector
from agentops.workers import WORKER_ARGS
from devtools.database import database_url
from devtools.process import free_port, spawn
from journal.models import Approval, ApprovalState, Attention, Entry, EntryKind, Step, Task
from journal.record import task_create
from tests.agentops.test_business_effects import renewal_refs
from tests.agentops.test_runner import finished
from tests.agentops.test_sagas import ended, trip_refs
from tests.agentops.test_webhooks import SECRET, Body, event, pending_step, post, sign
from tests.agentops.workers import Fleet
from tests.journal.support import invoice
from tests.sandbox.fixtures import SandboxHandle, wait_for

pytestmark = pytest.mark.usefixtures("committed")

LOCAL: dict[str, Any] = {"REMOTE_ADDR": "127.0.0.1", "HTTP_HOST": "127.0.0.1:8000"}
FOREIGN: dict[str, Any] = {"REMOTE_ADDR": "203.0.113.9", "HTTP_HOST": "203.0.113.1:8000"}

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(**request: Any) -> Samples:
    """/metrics as Prometheus reads it: every sample by name and labels."""
    response = Client().get("/metrics", **{**LOCAL, **request})
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(
        value
        for (sample, have), value in samples.items()
        if sample == name and set(labels.items()) <= set(have)
    )


def by(samples: Samples, name: str, *keys: str) -> dict[tuple[str, ...], float]:
    """``name``'s samples, by the values of ``keys``, leaving out the zeros."""
    out: dict[tuple[str, ...], float] = {}
    for (sample, have), value in samples.items():
        if sample == name and value:
            labels = dict(have)
            key = tuple(labels[k] for k in keys)
            out[key] = out.get(key, 0) + value
    return out


def moved(after: dict[Any, float], before: dict[Any, float]) -> dict[Any, float]:
    keys = set(after) | set(before)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in keys}
    return {k: v for k, v in delta.items() if v}


# --- who may read /metrics ---------------------------------------------------------------


@pytest.fixture
def tokens() -> Iterator[dict[str, str]]:
    tag = uuid.uuid4().hex[:8]
    _, reader = api_client_create(name=f"prometheus-{tag}", scopes=["metrics:read"])
    _, other = api_client_create(name=f"tasks-{tag}", scopes=["tasks:read"])
    yield {"reader": reader, "other": other}


def test_metrics_are_refused_to_a_foreign_address_and_to_a_wrong_token(
    tokens: dict[str, str],
) -> None:
    client = Client()
    refused = client.get("/metrics", **FOREIGN)
    assert refused.status_code == 401
    assert refused["WWW-Authenticate"].startswith("Bearer")
    assert b"agentops_" not in refused.content
    # A token that is no client's, and a client's token without the scope.
    wrong = client.get("/metrics", **FOREIGN, HTTP_AUTHORIZATION="Bearer ao_live_" + "x" * 43)
    assert wrong.status_code == 401 and b"agentops_" not in wrong.content
    unscoped = client.get("/metrics", **FOREIGN, HTTP_AUTHORIZATION=f"Bearer {tokens['other']}")
    assert unscoped.status_code == 403 and b"metrics:read" in unscoped.content
    # The scope opens it from anywhere; the loopback address without a token.
    reader = client.get("/metrics", **FOREIGN, HTTP_AUTHORIZATION=f"Bearer {tokens['reader']}")
    assert reader.status_code == 200 and b"agentops_tasks{" in reader.content
    assert client.get("/metrics", **LOCAL).status_code == 200
    # A name this site does not answer to, rebound to loopback by a page: refused.
    rebound = client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_HOST="evil.example:8000")
    assert rebound.status_code == 401
    # Behind a declared proxy, the proxy's loopback address is not the caller's.
    with override_settings(BEHIND_PROXY=True):
        proxied = client.get("/metrics", **LOCAL, HTTP_X_FORWARDED_FOR="203.0.113.9")
        assert proxied.status_code == 401
    with override_settings(METRICS_ALLOWED_NETWORKS=[ip_network("203.0.113.0/24")]):
        assert client.get("/metrics", **FOREIGN).status_code == 200
    assert client.post("/metrics", **LOCAL).status_code == 405


# --- what the metrics say after a scripted run ---------------------------------------------

COUNTERS = (
    "agentops_steps_total",
    "agentops_step_refusals_total",
    "agentops_lookups_total",
    "agentops_compensations_total",
    "agentops_runs_total",
    "agentops_step_attempt_seconds_count",
    "agentops_step_unknown_seconds_count",
)


def journal_says(tasks: list[Task]) -> dict[str, dict[Any, float]]:
    """What the counters must have moved by, from the journal of these tasks alone."""
    steps = list(Step.objects.filter(task__in=tasks, kind="call"))
    entries: list[Any] = list(
        Entry.objects.filter(task__in=tasks).select_related("step").order_by("id")
    )
    ever_unknown = {
        e.step_id
        for e in entries
        if e.kind == EntryKind.STEP_SETTLED and e.data.get("state") == "unknown"
    }
    outcomes: Tally[tuple[str, ...]] = Tally()
    undos: Tally[tuple[str, ...]] = Tally()
    for step in steps:
        said = ["refused" if step.refusal else step.state] + (
            ["unknown"] if step.pk in ever_unknown else []
        )
        for outcome in said:
            if outcome in ("done", "not_done", "refused", "unknown"):
                outcomes[(step.tool, outcome)] += 1
                if step.offsets_id is not None:
                    undos[(step.tool, outcome)] += 1
    attempts: Tally[tuple[str, ...]] = Tally()
    lookups: Tally[tuple[str, ...]] = Tally()
    for e in entries:
        if e.kind == EntryKind.ATTEMPT_ENDED or (
            e.kind == EntryKind.STEP_SETTLED and e.data.get("via") == "attempt"
        ):
            attempts[(e.step.tool,)] += 1
        if e.kind == EntryKind.LOOKUP:
            result = e.data["result"] if e.data["result"] != "unknown" else "failed"
            lookups[(e.step.tool, result)] += 1
    settled_after_unknown = Tally(
        (s.tool,) for s in steps if s.pk in ever_unknown and s.state in ("done", "not_done")
    )
    return {
        "agentops_steps_total": dict(outcomes),
        "agentops_step_refusals_total": dict(Tally((s.refusal,) for s in steps if s.refusal)),
        "agentops_lookups_total": dict(lookups),
        "agentops_compensations_total": dict(undos),
        "agentops_step_attempt_seconds_count": dict(attempts),
        "agentops_step_unknown_seconds_count": dict(settled_after_unknown),
        # Every run that took its task's lease moved the task's token by one.
        "runs": {(): float(sum(Task.objects.get(pk=t.pk).lease_token for t in tasks))},
    }


LABELS = {
    "agentops_steps_total": ("tool", "outcome"),
    "agentops_step_refusals_total": ("code",),
    "agentops_lookups_total": ("tool", "result"),
    "agentops_compensations_total": ("tool", "outcome"),
    "agentops_step_attempt_seconds_count": ("tool",),
    "agentops_step_unknown_seconds_count": ("tool",),
}


def counters(samples: Samples) -> dict[str, dict[tuple[str, ...], float]]:
    out = {name: by(samples, name, *keys) for name, keys in LABELS.items()}
    out["runs"] = {
        (): sum(
            v
            for (stopped,), v in by(samples, "agentops_runs_total", "stopped").items()
            if stopped != "busy"
        )
    }
    return out


def gauges_of_database() -> dict[str, Any]:
    """The gauges as the database says them now."""
    open_statuses = ("runnable", "waiting", "awaiting_approval", "needs_human")
    unknown = Step.objects.filter(state="unknown")
    return {
        "tasks": {(s,): float(Task.objects.filter(status=s).count()) for s in open_statuses},
        "needing": {
            (c,): float(Task.objects.filter(status="needs_human", attention_code=c).count())
            for c in Attention.values
        },
        "unknown": dict(Tally((t,) for t in unknown.values_list("tool", flat=True))),
        "approvals": float(Approval.objects.filter(state=ApprovalState.PENDING).count()),
    }


def gauges_scraped(samples: Samples) -> dict[str, Any]:
    def all_of(name: str, key: str) -> dict[tuple[str, ...], float]:
        return {(dict(have)[key],): value for (s, have), value in samples.items() if s == name}

    return {
        "tasks": all_of("agentops_tasks", "status"),
        "needing": all_of("agentops_tasks_needing_human", "code"),
        "unknown": by(samples, "agentops_steps_unknown", "tool"),
        "approvals": total(samples, "agentops_approvals_pending"),
    }


@pytest.mark.timeout(180)
def test_after_a_scripted_run_the_metrics_say_what_the_journal_says(
    fleet: Fleet,
    payments_sandbox: SandboxHandle,
    bookings_sandbox: SandboxHandle,
    clean_faults: None,
) -> None:
    before = counters(scrape())
    fleet.worker()
    fleet.sweeper()
    # The provider refuses us (421: not the provider's server): a person must look.
    payments_sandbox.client.fault("payment_intents.create", "misdirected")
    refused_us = finished(task_start(kind="renewal", goal="renew", refs=renewal_refs(invoice())))
    assert refused_us.attention_code == "misconfigured"
    # A plain renewal: charged, receipt sent.
    plain = finished(task_start(kind="renewal", goal="renew", refs=renewal_refs(invoice())))
    # The charge lands after the client gave up: unknown, then looked up and settled done;
    # a second task for the same invoice meanwhile is refused, waits, and is told.
    payments_sandbox.client.fault("payment_intents.create", "latency_before_effect", delay=1.5)
    inv = invoice()
    slow = task_start(kind="renewal", goal="renew", refs=renewal_refs(inv))
    wait_for(
        lambda: Task.objects.get(pk=slow.pk).status == "waiting",
        timeout=30,
        what="the charge to go unknown",
    )
    second = task_start(kind="renewal", goal="renew again", refs=renewal_refs(inv))
    slow, second = finished(slow), finished(second)
    # A trip whose hotel is full: the flight hold is released (a compensation).
    refs = trip_refs()
    bookings_sandbox.client.config(full_hotels=[refs["hotel"]])
    trip = ended(task_start(kind="trip", goal="Lisbon, hotel full", refs=refs))
    tasks = [refused_us, plain, slow, second, trip]
    assert [t.status for t in tasks] == [
        "needs_human",
        "finished",
        "finished",
        "finished",
        "compensated",
    ]

    expected = journal_says(tasks)
    # The journal has what the script meant to show.
    assert expected["agentops_steps_total"][("charge_customer", "unknown")] == 1
    assert expected["agentops_step_refusals_total"] == {("in_flight",): 1, ("already_done",): 1}
    assert expected["agentops_compensations_total"] == {("release_flight", "done"): 1}
    # The worker counted in its own files; the runs end a moment after their last write.
    wait_for(
        lambda: moved(counters(scrape())["runs"], before["runs"]) == expected["runs"],
        timeout=10,
        what="every run to be counted",
    )
    samples = scrape()
    after = counters(samples)
    for name in expected:
        assert moved(after[name], before[name]) == expected[name], name

    # The gauges are the database's counts, read as the scrape was.
    assert gauges_scraped(samples) == gauges_of_database()
    assert total(samples, "agentops_collector_up", source="database") == 1
    assert total(samples, "agentops_collector_up", source="redis") == 1
    assert total(samples, "agentops_queue_jobs") == 0
    assert total(samples, "agentops_tasks_runnable_untaken") == 0
    # The worker and the sweeper showed they were working, in their own processes.
    beats = by(samples, "agentops_heartbeat_timestamp_seconds", "process")
    assert set(beats) >= {("worker",), ("sweeper",)}
    now = collector.db_now().timestamp()
    assert all(now - beat < 60 for beat in beats.values()), beats


def test_the_gauges_read_only_what_an_index_serves() -> None:
    """Each query behind the gauges, planned with sequential scans switched off, still needs
    none: an index serves it, however long the history grows."""
    with CaptureQueriesContext(connection) as queries:
        now = collector.db_now()
        list(collector.task_gauges(now))
        list(collector.step_gauges(now))
        list(collector.approval_gauges(now))
    journal = [q["sql"] for q in queries.captured_queries if "journal_" in q["sql"]]
    assert len(journal) >= 4, journal
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        try:
            for sql in journal:
                cursor.execute(f"EXPLAIN {sql}")
                plan = "\n".join(row[0] for row in cursor.fetchall())
                assert "Seq Scan" not in plan, f"{sql}\n{plan}"
        finally:
            cursor.execute("RESET enable_seqscan")


# --- logs that join up ---------------------------------------------------------------------


def test_a_workers_line_about_a_step_is_json_with_its_task_key_tool_and_state(
    fleet: Fleet,
) -> None:
    worker = fleet.worker(LOG_FORMAT="json")
    task = finished(task_start(kind="renewal", goal="renew", refs=renewal_refs(invoice())))
    charge = Step.objects.get(task=task, tool="charge_customer")
    log = fleet.logs / f"rqworker-{fleet.procs.index(worker)}.log"

    def about_the_charge() -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        return [line for line in lines if line.get("step_key") == charge.key]

    lines = wait_for(about_the_charge, timeout=10, what="the worker's lines about the charge")
    settled = [line for line in lines if line.get("event") == "settled"]
    assert settled, lines
    # Recorded and settled by its first attempt in one run: one line says both.
    assert len(lines) == 1 and settled[0]["recorded"] is True, lines
    assert "recorded, attempt 1 settled done" in settled[0]["message"]
    line = settled[0]
    assert line["task_id"] == str(task.pk)
    assert line["step_key"] == charge.key
    assert (line["tool"], line["state"]) == ("charge_customer", "done")
    assert line["level"] == "INFO" and line["logger"] == "agentops.steps"
    assert charge.key in line["message"]


def json_lines(log: Path) -> list[dict[str, Any]]:
    """Every line of a process's output, each of which must be one JSON object."""
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"{log.name}: a line that is not JSON: {line!r}") from None
        assert isinstance(parsed[-1], dict), line
    return parsed


def test_the_web_servers_the_workers_and_the_sweepers_lines_are_json_naming_their_task_and_step(
    fleet: Fleet,
) -> None:
    # The web server as production runs it: gunicorn, its own lines and the app's.
    port = free_port()
    web_log = fleet.logs / "web.log"
    web_env = {
        **fleet.env,
        "DATABASE_URL": database_url("web"),
        "LOG_FORMAT": "json",
        "STRIPE_WEBHOOK_SECRET": SECRET,
        "GUNICORN_BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": "1",
    }
    argv = [sys.executable, "-m", "gunicorn", "-c", "python:agentops.gunicorn_conf"]
    fleet.procs.append(spawn(argv, env=web_env, output=web_log))
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            return requests.get(f"{url}/healthz", timeout=2).status_code in (200, 503)
        except requests.ConnectionError:
            return False

    wait_for(answers, timeout=30, what="gunicorn to answer")

    # A request about a step: a provider's notification, which the web server stores and a
    # worker verifies and applies.
    worker = fleet.worker(LOG_FORMAT="json", STRIPE_WEBHOOK_SECRET=SECRET)
    worker_log = fleet.logs / f"{WORKER_ARGS[0]}-{fleet.procs.index(worker)}.log"
    step = pending_step()
    payload = event("payment_intent.succeeded", step, status="succeeded")
    headers = {"Stripe-Signature": sign(payload), "Content-Type": "application/json"}
    settled = requests.post(f"{url}/webhooks/stripe", data=payload, headers=headers, timeout=10)
    assert settled.status_code == 200, settled.text
    wait_for(lambda: Step.objects.get(pk=step.pk).state == "done", timeout=15, what="the worker")
    # And one refused: a line saying why, about no step.
    forged = requests.post(
        f"{url}/webhooks/stripe",
        data=payload,
        headers={**headers, "Stripe-Signature": "t=1,v1=deadbeef"},
        timeout=10,
    )
    assert forged.status_code == 400

    def about_the_step() -> list[dict[str, Any]]:
        return [line for line in json_lines(worker_log) if line.get("step_key") == step.key]

    (line,) = wait_for(about_the_step, timeout=10, what="the worker's line about the step")
    assert line["task_id"] == str(step.task_id)
    assert (line["tool"], line["state"], line["event"]) == ("charge_customer", "done", "settled")
    assert line["via"] == "webhook payment_intent.succeeded"
    assert line["logger"] == "agentops.steps" and line["level"] == "INFO"
    assert line["pid"] != os.getpid()  # written by the worker, not by this test
    lines = json_lines(web_log)
    refused = [r for r in lines if r["message"].startswith("Stripe webhook refused")]
    assert len(refused) == 1 and refused[0]["level"] == "WARNING", lines
    accessed = [r for r in lines if r["logger"] == "gunicorn.access"]
    assert any("/webhooks/stripe" in r["message"] for r in accessed), lines

    # The sweeper, ringing for a task that can advance and that nobody runs.
    stranded = task_create(kind="renewal", goal="renew", refs=renewal_refs(invoice()))
    sweeper = fleet.sweeper(LOG_FORMAT="json")
    sweeper_log = fleet.logs / f"sweep-{fleet.procs.index(sweeper)}.log"

    def about_the_task() -> list[dict[str, Any]]:
        return [r for r in json_lines(sweeper_log) if r.get("task_id") == str(stranded.pk)]

    rang = wait_for(about_the_task, timeout=15, what="the sweeper's line about the task")
    assert rang[0]["logger"] == "agentops.runner" and "rang for it" in rang[0]["message"]
    assert str(stranded.pk) in rang[0]["message"]

    # The pass's count comes once the pass is over, after its lines about each task.
    def counted() -> list[dict[str, Any]]:
        return [r for r in json_lines(sweeper_log) if r["logger"] == "agentops.sweeper"]

    counts = wait_for(counted, timeout=15, what="the sweeper's count of the tasks it rang for")
    assert all("rung" in r for r in counts), counts


# --- a provider's reports ------------------------------------------------------------------


@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_a_providers_reports_are_counted_as_applied_unchanged_or_conflict() -> None:
    before = scrape()
    step = pending_step()
    for kind, status in [
        ("payment_intent.succeeded", "succeeded"),  # settles it: applied
        ("payment_intent.succeeded", "succeeded"),  # another event saying so: unchanged
        ("payment_intent.payment_failed", "requires_payment_method"),  # contradicts: conflict
    ]:
        payload = event(kind, step, status=status)
        assert post(payload, sign(payload)).status_code == 200
    other = pending_step()
    payload = event("payment_intent.succeeded", other, status="succeeded", amount=1)
    assert post(payload, sign(payload)).status_code == 200  # not the step's amount: conflict
    after = scrape()
    reports = moved(
        by(after, "agentops_webhook_reports_total", "provider", "outcome"),
        by(before, "agentops_webhook_reports_total", "provider", "outcome"),
    )
    assert reports == {
        ("stripe", "applied"): 1,
        ("stripe", "unchanged"): 1,
        ("stripe", "conflict"): 2,
    }
    steps = moved(
        by(after, "agentops_steps_total", "tool", "outcome"),
        by(before, "agentops_steps_total", "tool", "outcome"),
    )
    assert steps == {("charge_customer", "done"): 1}
    assert Step.objects.get(pk=step.pk).state == "done"
    assert Step.objects.get(pk=other.pk).state == "pending"


@override_settings(STRIPE_WEBHOOK_SECRET=SECRET)
def test_each_webhook_delivery_is_counted_once_by_what_became_of_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def counted(deliver: Any, status: int) -> dict[Any, float]:
        """What one delivery moved agentops_webhook_events_total by."""
        before = by(scrape(), "agentops_webhook_events_total", "provider", "outcome")
        response = deliver()
        assert response.status_code == status, response.content
        return moved(by(scrape(), "agentops_webhook_events_total", "provider", "outcome"), before)

    def once(outcome: str) -> dict[Any, float]:
        return {("stripe", outcome): 1}

    step = pending_step()
    succeeded = event("payment_intent.succeeded", step, status="succeeded")
    assert counted(lambda: post(succeeded, sign(succeeded)), 200) == once("applied")
    assert Step.objects.get(pk=step.pk).state == "done"
    # The same event delivered again (Stripe retries until it has a 2xx).
    assert counted(lambda: post(succeeded, sign(succeeded)), 200) == once("duplicate")
    # Another event saying what the journal says.
    again = event("payment_intent.succeeded", step, status="succeeded")
    assert counted(lambda: post(again, sign(again)), 200) == once("unchanged")
    # An event contradicting the settled step: its task goes to a person.
    failed = event("payment_intent.payment_failed", step, status="requires_payment_method")
    assert counted(lambda: post(failed, sign(failed)), 200) == once("conflict")
    # One not matching the open step it names (another amount).
    other = pending_step()
    wrong = event("payment_intent.succeeded", other, status="succeeded", amount=1)
    assert counted(lambda: post(wrong, sign(wrong)), 200) == once("conflict")
    # One about no step of agentops'.
    stranger = event("payment_intent.succeeded", "ao:not-a-task:1", status="succeeded")
    assert counted(lambda: post(stranger, sign(stranger)), 200) == once("ignored")

    # Refused, nothing kept: a bad signature, a malformed body, a body too large.
    forged = event("payment_intent.succeeded", other, status="succeeded")
    forged_with = sign(forged, secret="whsec_someone_else_" + "x" * 16)
    assert counted(lambda: post(forged, forged_with), 400) == once("refused")
    assert counted(lambda: post(b"[1, 2]", sign(b"[1, 2]")), 400) == once("refused")
    size = commerce.webhooks.MAX_BODY_BYTES + 1
    environ: dict[str, Any] = {"wsgi.input": Body(size), "CONTENT_LENGTH": str(size)}
    too_large = lambda: Client().generic(  # noqa: E731
        "POST", "/webhooks/stripe", headers={"Stripe-Signature": sign(b"")}, **environ
    )
    assert counted(too_large, 413) == once("refused")

    # Failing while applying (a worker's part): counted failed, the event left stored as
    # received; applied once it can be, and counted so.
    def broken(**kwargs: Any) -> bool:
        raise OperationalError("the database went away mid-event")

    monkeypatch.setattr(commerce.webhooks, "step_settle", broken)
    late = event("payment_intent.succeeded", other, status="succeeded")
    stored = post(late, sign(late), apply=False)
    assert stored.status_code == 200
    event_id = stored.json()["event"]

    def apply() -> Any:
        with contextlib.suppress(OperationalError):
            provider_event_apply(provider="stripe", event_id=event_id)
        return stored

    assert counted(apply, 200) == once("failed")
    monkeypatch.undo()

    def applied() -> Any:
        provider_event_apply(provider="stripe", event_id=event_id)
        return stored

    assert counted(applied, 200) == once("applied")
    assert Step.objects.get(pk=other.pk).state == "done"
