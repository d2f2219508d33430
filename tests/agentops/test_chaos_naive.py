"""The chaos run's naive harness (issues 12, 16): a typical tool-calling loop, calling
again under new keys, asking the operator as the safe harness does, run only by its own
workers.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import django_rq
import pytest
from django.test import override_settings
from rq.serializers import JSONSerializer

from agentops.kinds import tool_registry
from agentops.workers import AgentopsJob
from devtools.chaos.audit import audit_naive
from devtools.chaos.ledgers import Ledgers
from devtools.chaos.naive import (
    NAIVE_JOB,
    NaiveJob,
    NaiveLoop,
    NaiveWorker,
    approval_path,
    decision_path,
    read_json,
    write_whole,
)
from devtools.chaos.plan import plan_make
from tests.journal.support import invoice
from tests.sandbox.fixtures import SandboxHandle

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")


@pytest.fixture
def on_providers(on_sandbox: dict[str, Any]) -> Iterator[None]:
    with override_settings(**on_sandbox, TOOL_TIMEOUT_SECONDS=1.0, PLANNER="scripted"):
        yield


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
    assert record["summary"].startswith(
        f"1 done, 1 not done. Done: send_email for payment_failed:{inv} (message msg_"
    )
    assert record["summary"].endswith(
        f"Not done: charge_customer for {inv} — failed after 3 errors."
    )
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


def test_the_naive_loop_asks_the_operator_as_the_safe_harness_does(
    on_providers: None,
    payments_sandbox: SandboxHandle,
    bookings_sandbox: SandboxHandle,
    tmp_path: Path,
) -> None:
    inv = invoice()
    refs = {
        "invoice": inv,
        "amount": 400_000,  # above 3,000.00: a person approves the charge first
        "email": "ada@example.com",
        "flight": "TP1351",
        "traveller": f"Ada {inv}",
        "hotel": "Alfama",
        "check_in": "2027-03-01",
        "check_out": "2027-03-02",
    }
    name = f"naive-{inv}"

    def operator() -> None:  # what the chaos run's driver does for a naive task
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            request = read_json(approval_path(tmp_path, name))
            if request is not None:
                assert request["tool"] == "charge_customer" and "3,000.00" in request["reason"]
                write_whole(
                    decision_path(tmp_path, name), {"n": request["n"], "decision": "reject"}
                )
                return
            time.sleep(0.05)

    answering = threading.Thread(target=operator)
    answering.start()
    loop = NaiveLoop({"task": name, "kind": "trip", "refs": refs}, tool_registry(), tmp_path)
    assert loop.run() == "compensated"
    answering.join()
    record = json.loads((tmp_path / f"{name}.json").read_text())
    assert record["summary"].startswith("Compensated. 2 undone. Undone: hold_flight for TP1351")
    ledgers = Ledgers(
        entries={"bookings": bookings_sandbox.client.ledger(), "payments": []}, fault_logs={}
    )
    figures = audit_naive(
        plan=plan_make(seed=1, tasks=1, run="unused"),
        task_names=[name],
        directory=tmp_path,
        ledgers=ledgers,
        hits=[],
    )
    assert figures["untrue_summaries"] == 0 and figures["compensation_mismatch"] == 0
    assert not [e for e in payments_sandbox.client.ledger() if inv in json.dumps(e)]


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
