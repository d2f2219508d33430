"""The chaos run (issue 12): its plan, its naive harness, its audit, and a small run of it.

The small run is the real thing at a tenth of the size: real worker processes killed and
stopped, PostgreSQL crash-restarted and Redis restarted empty (through scripts/stack.py,
which started them), providers failing in every way, then the journal checked against the
providers' ledgers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import django_rq
import pytest
from django.db import connections
from django.test import override_settings
from rq.serializers import JSONSerializer

from agentops.kinds import rules_for, tools_for
from agentops.planners.scripted import ScriptedPlanner as Playbooks
from agentops.runner import task_policy, task_start
from agentops.tools import tool_registry
from agentops.workers import AgentopsJob, AgentopsWorker
from devtools.chaos.audit import Ledgers, audit_journal, audit_naive, business_duplicates
from devtools.chaos.naive import NAIVE_JOB, NaiveJob, NaiveLoop, NaiveWorker
from devtools.chaos.plan import plan_make
from devtools.chaos.run import MUST_BE_ZERO, ChaosRefused, chaos_run
from journal.models import Step
from journal.run import task_advance
from tests.agentops.workers import quiet_world
from tests.journal.support import invoice
from tests.sandbox.fixtures import SandboxHandle

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")


@pytest.fixture
def on_providers(on_sandbox: dict[str, Any]) -> Iterator[None]:
    with override_settings(**on_sandbox, TOOL_TIMEOUT_SECONDS=1.0, PLANNER="scripted"):
        yield


def test_a_plan_is_its_seed_alone() -> None:
    first = plan_make(seed=4, tasks=120, run="r")
    again = plan_make(seed=4, tasks=120, run="r")
    other = plan_make(seed=5, tasks=120, run="r")
    assert first == again and first != other
    assert {t.kind for t in first.tasks} == {"renewal", "trip", "reminders"}
    assert any(t.repeats for t in first.tasks), "no business effect is asked for twice"
    assert any(t.held for t in first.tasks) and first.full_hotels
    kinds = {e.kind for e in first.events}
    assert kinds == {
        "worker_sigkill",
        "worker_sigstop",
        "redis_restart",
        "postgres_restart",
        "provider_down",
    }
    assert all(0 < e.at < first.faults_until for e in first.events)
    stops = [e for e in first.events if e.kind == "worker_sigstop"]
    assert all(e.duration > first.world.lease for e in stops)  # past the lease
    latency = [r for r in first.rules if r.fault == "latency_before_effect"]
    assert all(r.delay > first.world.tool_timeout for r in latency)  # the effect lands late


def _row(operation: str, at: float, key: str, object_id: str, **extra: Any) -> dict[str, Any]:
    return {"operation": operation, "at": at, "key": key, "object_id": object_id, **extra}


def test_business_duplicates_are_told_from_the_ledgers_alone() -> None:
    charge = {"metadata": {"invoice": "INV-1"}}
    ledgers = Ledgers(
        entries={
            "payments": [
                _row("payment_intents.create", 1, "a", "pi_1", params=charge, status="succeeded"),
                # Refunded, then charged again: allowed (a full refund frees the invoice).
                _row("refunds.create", 3, "a:undo", "re_1", payment_intent="pi_1"),
                _row("payment_intents.create", 4, "c", "pi_2", params=charge, status="succeeded"),
                # A declined card is a request, not an effect.
                _row("payment_intents.create", 5, "d", "pi_3", params=charge, status="failed"),
                _row("payment_intents.create", 6, "e", "pi_4", params=charge, status="succeeded"),
            ],
            "mail": [
                _row("messages.send", t, f"m{t}", f"msg_{t}", params={"headers": h})
                for t, h in (
                    (1, {"X-Agentops-Reference": "INV-2", "X-Agentops-Purpose": "reminder 1"}),
                    (2, {"X-Agentops-Reference": "inv-2 ", "X-Agentops-Purpose": "reminder 1"}),
                    (3, {"X-Agentops-Reference": "INV-2", "X-Agentops-Purpose": "reminder 2"}),
                    (4, {"X-Agentops-Reference": "INV-2", "X-Agentops-Purpose": "notice"}),
                    (5, {"X-Agentops-Reference": "INV-2", "X-Agentops-Purpose": "notice"}),
                )
            ],
        },
        fault_logs={},
    )
    found = business_duplicates(ledgers)
    assert len(found) == 2, found
    assert found[0].startswith("a second reminder 1 of inv-2")
    assert found[1].startswith("a second charge for inv-1 (pi_4; first pi_2)")


def test_the_naive_loop_calls_again_without_a_key_and_is_not_truthful(
    on_providers: None, payments_sandbox: SandboxHandle, mail_sandbox: SandboxHandle, tmp_path: Path
) -> None:
    inv = invoice()
    # Every charge lands and then answers 500: a typical loop reads three errors.
    payments_sandbox.client.fault("payment_intents.create", "error_500_after", times=3)
    refs = {"invoice": inv, "amount": 4900, "email": "ada@example.com"}
    spec: dict[str, Any] = {"task": f"naive-{inv}", "kind": "renewal", "refs": refs}
    outcome = NaiveLoop(spec, tool_registry(), tmp_path).run()
    assert outcome == "finished"
    record = json.loads((tmp_path / f"naive-{inv}.json").read_text())
    assert record["claim"] == f"{inv} not charged: the payment failed"
    charge, notice = record["intents"]
    assert [a["key"] for a in charge["attempts"]] == [
        f"naive:naive-{inv}:1:{n}"
        for n in (1, 2, 3)  # a new key every time
    ]
    assert notice["tool"] == "send_email" and notice["ok"] is True

    ledgers = Ledgers(
        entries={
            "payments": payments_sandbox.client.ledger(),
            "mail": mail_sandbox.client.ledger(),
        },
        fault_logs={},
    )
    mine = [e for e in ledgers.effects if (e.params.get("metadata") or {}).get("invoice") == inv]
    assert len(mine) == 3  # charged three times, told "failed"
    plan = plan_make(seed=1, tasks=1, run="unused")
    figures = audit_naive(
        plan=plan, task_names=[spec["task"]], directory=tmp_path, ledgers=ledgers, hits=[]
    )
    assert figures["duplicates"] == 1 and figures["untrue_summaries"] == 1
    assert figures["lost"] == 0


def test_only_a_naive_worker_runs_the_naive_job() -> None:
    def job(cls: type[AgentopsJob], func: str) -> AgentopsJob:
        made = cls.create(
            func,
            args=["{}"],
            connection=django_rq.get_connection("default"),
            serializer=JSONSerializer,
        )
        assert isinstance(made, cls)
        return made

    assert job(AgentopsJob, NAIVE_JOB).refusal() is not None  # a production worker's
    assert job(NaiveJob, NAIVE_JOB).refusal() is None
    assert job(NaiveJob, "agentops.jobs.run_task").refusal() is not None
    worker = NaiveWorker([django_rq.get_queue("default")], connection=django_rq.get_connection())
    assert worker.job_class is NaiveJob and worker.serializer is JSONSerializer


def test_the_audit_counts_an_effect_a_provider_performed_twice_under_one_key(
    on_providers: None, payments_sandbox: SandboxHandle, mail_sandbox: SandboxHandle
) -> None:
    quiet_world()
    inv = invoice()
    task = task_start(
        kind="renewal", goal="renew", refs={"invoice": inv, "amount": 4900, "email": "a@b.ch"}
    )
    task_advance(
        task_id=task.pk,
        planner=Playbooks(),
        tools=tools_for(task),
        policy=task_policy(task),
        rules=rules_for(task),
    )
    charge = Step.objects.get(task=task, n=1)
    mail = Step.objects.get(task=task, n=2)
    [paid] = payments_sandbox.client.ledger(key=charge.key)
    [sent] = mail_sandbox.client.ledger(key=mail.key)
    honest = Ledgers(entries={"payments": [paid], "mail": [sent]}, fault_logs={})
    plan = plan_make(seed=1, tasks=1, run="unused")
    figures = audit_journal(plan=plan, task_ids=[str(task.pk)], ledgers=honest, hits=[])
    assert {name: figures[name] for name in MUST_BE_ZERO if name != "business_duplicates"} == {
        name: 0 for name in MUST_BE_ZERO if name != "business_duplicates"
    }
    # The same charge twice under the step's key, as a retry after the key died would do.
    twice = Ledgers(
        entries={"payments": [paid, {**paid, "object_id": "pi_again"}], "mail": [sent]},
        fault_logs={},
    )
    figures = audit_journal(plan=plan, task_ids=[str(task.pk)], ledgers=twice, hits=[])
    assert figures["duplicates"] == 1 and figures["journal_mismatch"] == 1
    assert len(business_duplicates(twice)) == 1


def test_a_run_does_not_share_its_queue_with_other_workers(tmp_path: Path) -> None:
    quiet_world()
    queue = django_rq.get_queue("default")
    other = AgentopsWorker([queue], connection=queue.connection, name="make-run-worker")
    other.register_birth()
    try:
        with pytest.raises(ChaosRefused, match=r"1 RQ worker.* \(make-run-worker\)"):
            chaos_run(tasks=1, workdir=tmp_path, out=None)
    finally:
        other.register_death()
    assert not (tmp_path / "logs").exists()  # nothing was started


@pytest.mark.stack("postgres", "redis")  # the run restarts both
@pytest.mark.timeout(300)  # some 20 s alone: thirty tasks, real workers, faults, restarts
def test_a_small_chaos_run_repeats_nothing_and_loses_nothing(tmp_path: Path) -> None:
    redis = quiet_world()
    try:
        figures = chaos_run(tasks=30, seed=1, workers=2, workdir=tmp_path, out=None)
    finally:
        connections.close_all()  # PostgreSQL was restarted under this process
        redis.flushdb()
    failing = {name: figures[name] for name in MUST_BE_ZERO if figures[name]}
    assert failing == {}, json.dumps(figures.get("examples"), indent=1)
    assert figures["ok"] is True
    assert sum(figures["outcomes"].values()) == figures["tasks"] == 30
    injected = figures["faults_injected"]
    for kind in ("worker_sigkill", "worker_sigstop"):
        assert injected.get(kind, 0) >= 1, (kind, injected)
    for server in ("postgres", "redis"):
        done = injected.get(f"{server}_restart", 0)
        skipped = figures["faults_skipped"].get(f"{server}_restart", 0)
        assert (done, skipped) == (1, 0), (server, figures)
    assert sum(injected.values()) > 20
    assert figures["provider_effects"] > 30
