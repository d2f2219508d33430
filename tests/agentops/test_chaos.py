"""The chaos run (issues 12, 16): its plan, its model, its naive harness, its audit, its
verdict, the README's figures, and a small run of it.

The small run is the real thing at a tenth of the size: real worker processes killed and
stopped, PostgreSQL crash-restarted and Redis restarted empty (through scripts/stack.py,
which started them), providers failing in every way, a model that slips, one charge the
provider refuses us for on purpose, then the journal checked against the providers' ledgers.
"""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import django_rq
import pytest
import stripe
from django.db import connections
from django.test import override_settings
from rq.serializers import JSONSerializer

from agentops.effects import intent_get
from agentops.kinds import rules_for, tools_for
from agentops.mcp.services import Asked, intent_asked
from agentops.planners.scripted import ScriptedPlanner as Playbooks
from agentops.runner import task_policy, task_start
from agentops.tools import tool_registry
from agentops.workers import AgentopsJob, AgentopsWorker
from devtools.chaos import agent as mcp
from devtools.chaos.audit import answers_untrue, audit_journal, audit_naive
from devtools.chaos.figures import readme_block, render, runs_load
from devtools.chaos.ledgers import Ledgers, business_duplicates, by_cause
from devtools.chaos.model import (
    FORGET,
    NEIGHBOUR,
    REPHRASE,
    Misbehaving,
    Model,
    corrected,
    neighbouring,
    rephrased,
)
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
from devtools.chaos.plan import REFUSAL, TaskSpec, plan_make
from devtools.chaos.report import MUST_BE_ZERO, verdict
from devtools.chaos.run import ChaosRefused, chaos_run
from devtools.chaos.truth import Claim, summaries_untrue, summary_claims
from devtools.management.commands.chaos import Command
from devtools.process import REPO
from journal.models import Step
from journal.outcomes import StepState
from journal.protocols import Call, Refusal, StepFact, TaskFacts
from journal.run import task_advance
from journal.summary import task_summary
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
        "mcp_server_kill",  # the mcp harness's only; drawn from dice of its own
    }
    # The invoice lookups of the mcp harness's intents fail as the other lookups do.
    assert {r.fault for r in first.rules if r.operation == "invoices.search"} == {
        "error_500_before",
        "reset_before_read",
    }
    assert all(0 < e.at < first.faults_until for e in first.events)
    stops = [e for e in first.events if e.kind == "worker_sigstop"]
    assert all(e.duration > first.world.lease for e in stops)  # past the lease
    latency = [r for r in first.rules if r.fault == "latency_before_effect"]
    assert all(r.delay > first.world.tool_timeout for r in latency)  # the effect lands late
    # Every fault is recoverable by design unless the run is asked to refuse us on purpose.
    assert first.refusals == 0 and not any(r.fault == REFUSAL[2] for r in first.rules)
    refusing = plan_make(seed=4, tasks=120, run="r", refusals=2)
    assert (refusing.rules[0].fault, refusing.rules[0].times) == (REFUSAL[2], 2)
    assert refusing.rules[1:] == first.rules and refusing.tasks == first.tasks


def test_the_naive_harness_keeps_the_stripe_library_s_own_retries() -> None:
    world = plan_make(seed=1, tasks=10, run="r").world
    # stripe 16 retries twice by default (module-level API); agentops tells it not to.
    assert stripe.max_network_retries == 2
    assert world.env("naive")["STRIPE_MAX_NETWORK_RETRIES"] == "2"
    assert world.env("safe")["STRIPE_MAX_NETWORK_RETRIES"] == "0"
    assert world.env("mcp")["STRIPE_MAX_NETWORK_RETRIES"] == "0"  # agentops' own settings


def _row(operation: str, at: float, key: str, object_id: str, **extra: Any) -> dict[str, Any]:
    return {"operation": operation, "at": at, "key": key, "object_id": object_id, **extra}


def test_business_duplicates_are_told_from_the_ledgers_alone_with_their_cause() -> None:
    charge = {"metadata": {"invoice": "INV-1"}}
    ledgers = Ledgers(
        entries={
            "payments": [
                _row(
                    "payment_intents.create", 1, "t1:a", "pi_1", params=charge, status="succeeded"
                ),
                # Refunded, then charged again: allowed (a full refund frees the invoice).
                _row("refunds.create", 3, "t1:a:undo", "re_1", payment_intent="pi_1"),
                _row(
                    "payment_intents.create", 4, "t1:c", "pi_2", params=charge, status="succeeded"
                ),
                # A declined card is a request, not an effect.
                _row("payment_intents.create", 5, "t2:d", "pi_3", params=charge, status="failed"),
                # The same invoice, written otherwise: one object in the guards' normal form.
                _row(
                    "payment_intents.create",
                    6,
                    "t2:e",
                    "pi_4",
                    params={"metadata": {"invoice": " inv-1"}},
                    status="succeeded",
                ),
            ],
            "mail": [
                _row("messages.send", t, f"{task}:m", f"msg_{t}", params={"headers": h})
                for t, task, h in (
                    (
                        1,
                        "t3",
                        {"X-Agentops-Reference": "INV-2", "X-Agentops-Purpose": "reminder 1"},
                    ),
                    (
                        2,
                        "t3",
                        {"X-Agentops-Reference": "inv-2 ", "X-Agentops-Purpose": "reminder 1"},
                    ),
                    (
                        3,
                        "t3",
                        {"X-Agentops-Reference": "INV-2", "X-Agentops-Purpose": "reminder 2"},
                    ),
                    (4, "t3", {"X-Agentops-Reference": "INV-2", "X-Agentops-Purpose": "notice"}),
                    (5, "t4", {"X-Agentops-Reference": "INV-2", "X-Agentops-Purpose": "notice"}),
                )
            ],
        },
        fault_logs={},
    )
    owners = {"t1": 1, "t2": 2, "t3": 3, "t4": 4}
    found = business_duplicates(
        ledgers,
        owner=lambda key: owners.get(key.split(":")[0]),
        asked_twice=lambda a, b: {a, b} == {1, 2},  # the plan asked tasks 1 and 2 alike
    )
    assert [str(d) for d in found] == [
        "a second email:reminder:1:inv-2  (msg_2; first msg_1): from faults",
        "a second charge: inv-1 (pi_4; first pi_2): asked twice",
    ]
    assert by_cause(found) == {"from_faults": 1, "asked_twice": 1, "wrong_object": 0}
    unrelated = business_duplicates(
        ledgers, owner=lambda key: owners.get(key.split(":")[0]), asked_twice=lambda a, b: False
    )
    assert by_cause(unrelated)["wrong_object"] == 1


def _fact(n: int, tool: str, state: StepState, **extra: Any) -> StepFact:
    return StepFact(n=n, tool=tool, args={}, state=state, detail="", key=f"ao:t:{n}", **extra)


def test_a_summary_reads_back_into_what_it_claims() -> None:
    done = StepState.DONE
    steps = [
        _fact(1, "hold_flight", done, guard="flight:TP1351:Ada L", evidence={"id": "hold_1"}),
        _fact(
            2,
            "book_hotel",
            done,
            guard="hotel:Full House:Ada L:2027-03-01",
            evidence={"id": "bk_1"},
            offset=True,
        ),
        _fact(3, "cancel_hotel", done, evidence={"id": "bk_1"}, offsets=2),
        _fact(4, "charge_customer", done, guard="charge:T-1", evidence={"charge": "ch_9"}),
        StepFact(
            5,
            "send_email",
            {},
            StepState.NOT_DONE,
            "the mail provider refused it (400); it did not happen",
            "ao:t:5",
            guard="email:itinerary:T-1",
        ),
        StepFact(6, "send_email", {}, StepState.UNKNOWN, "timed out", "ao:t:6", guard="x:y"),
        StepFact(
            7,
            "charge_customer",
            {},
            StepState.NOT_DONE,
            "already done: charge_customer for T-1 (charge ch_9); do not do it again",
            "ao:t:7",
            guard="charge:T-1",
            refusal=Refusal.ALREADY_DONE,
        ),
    ]
    claims = summary_claims("Compensated. " + task_summary(steps))
    assert claims == [
        Claim("done", "hold_flight", "TP1351:Ada L", "hold_1", text=claims[0].text),
        Claim("done", "charge_customer", "T-1", "ch_9", text=claims[1].text),
        Claim(
            "undone",
            "book_hotel",
            "Full House:Ada L:2027-03-01",
            "bk_1",
            "cancel_hotel",
            "bk_1",
            text=claims[2].text,
        ),
        Claim("not done", "send_email", "itinerary:T-1", text=claims[3].text),
        Claim("unknown", "send_email", "y", reference="ao:t:6", text=claims[4].text),
        Claim("refused", "charge_customer", "T-1", text=claims[5].text),
    ]
    assert claims[1].guard == "charge:T-1" and claims[3].guard == "email:itinerary:T-1"
    assert summary_claims(task_summary([])) == []


def test_a_summary_is_set_against_the_ledgers_whichever_harness_told_it() -> None:
    pay = {"metadata": {"invoice": "INV-7"}}
    ledgers = Ledgers(
        entries={
            "payments": [
                _row("payment_intents.create", 1, "ao:a:1", "pi_1", params=pay, status="succeeded"),
                _row("payment_intents.create", 2, "ao:b:1", "pi_2", params=pay, status="succeeded"),
                _row("payment_intents.create", 3, "ao:b:2", "pi_3", params=pay, status="succeeded"),
                _row(
                    "payment_intents.create",
                    4,
                    "ao:c:1",
                    "pi_4",
                    params={"metadata": {"invoice": "INV-8"}},  # a neighbouring invoice
                    status="succeeded",
                ),
            ],
        },
        fault_logs={},
        charges={"ch_1": "pi_1", "ch_2": "pi_2", "ch_3": "pi_3", "ch_4": "pi_4"},
    )
    said = {
        "a": "1 done. Done: charge_customer for INV-7 (charge ch_1).",  # true
        "b": "1 done. Done: charge_customer for INV-7 (charge ch_2).",  # a second, unsaid
        "c": "1 done. Done: charge_customer for INV-7 (charge ch_4).",  # another invoice
        "d": "1 not done. Not done: charge_customer for INV-7 — failed after 3 errors.",
        "e": "1 done. Done: charge_customer for INV-7 (charge ch_404).",  # no such effect
    }
    prefixes = {task: f"ao:{task}:" for task in said}
    untrue = summaries_untrue(said, key_prefix=prefixes, ledgers=ledgers)
    assert [line.split(":")[0] for line in untrue] == ["b", "c", "e"]
    assert "does not mention charge_customer pi_3" in untrue[0]
    assert "acted on 'charge:INV-8'" in untrue[1]
    # The same words, said by a task whose keys made the charge: "not done" is untrue.
    [denied] = summaries_untrue({"d": said["d"]}, key_prefix={"d": "ao:a:"}, ledgers=ledgers)
    assert "the provider performed it (pi_1 under ao:a:1)" in denied


def test_the_model_slips_replayably_and_the_harness_refuses_its_slips() -> None:
    charge = {"invoice": "INV-s1-x-5", "amount": 4900, "currency": "usd"}
    assert rephrased(charge)["amount"] == "49.00"
    assert rephrased(
        {"subject": "Receipt for X", "check_in": "2027-03-05", "flight": "TP1351"}
    ) == {
        "subject": "Following up: receipt for X",
        "check_in": "5 March 2027",
        "flight": "TP 1351",
    }
    assert neighbouring(charge)["invoice"] == "INV-s1-x-6"
    assert neighbouring({"passenger": "Traveller s1-x-9", "flight": "TP1"})["passenger"] == (
        "Traveller s1-x-10"
    )
    model = Model(seed=3)
    picks = [model.slip(f"situation {i}", 0) for i in range(400)]
    assert picks == [model.slip(f"situation {i}", 0) for i in range(400)]  # replayable
    assert {REPHRASE, NEIGHBOUR, FORGET, None} == set(picks)
    assert 0.2 < sum(p is not None for p in picks) / len(picks) < 0.4
    assert model.slip("situation 1", model.most) is None  # corrected twice: it behaves

    refs = {"invoice": "INV-s1-x-5", "amount": 4900, "email": "a@b.ch"}
    declined = StepFact(
        1,
        "charge_customer",
        {**charge, "payment_method": "pm_card_visa"},
        StepState.NOT_DONE,
        "payment pi_1 did not go through (card_declined)",
        "ao:00000000-0000-0000-0000-000000000000:1",
        guard="charge:INV-s1-x-5",
    )
    facts = TaskFacts("00000000-0000-0000-0000-000000000000", "renewal", "g", refs, [declined])
    slipped = Misbehaving(Model(seed=1, rate=1.0, weights=(1.0, 0.0, 0.0))).decide(facts)
    assert isinstance(slipped, Call) and slipped.args["amount"] == "49.00"
    assert slipped.raw == {"chaos": REPHRASE}
    # Refused (invalid arguments), the slip is set aside: the playbook goes on from the facts.
    refused = StepFact(
        2,
        "charge_customer",
        slipped.args,
        StepState.NOT_DONE,
        "refused",
        "ao:x:2",
        refusal=Refusal.INVALID_ARGUMENTS,
    )
    assert corrected(TaskFacts(facts.task_id, "renewal", "g", refs, [declined, refused])).steps == [
        declined
    ]
    honest = Misbehaving(Model(seed=1, rate=0.0)).decide(facts)
    assert isinstance(honest, Call) and honest.args["purpose"] == "payment_failed"


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
    charges = {charge.evidence["charge"]: charge.evidence["payment_intent"]}
    honest = Ledgers(entries={"payments": [paid], "mail": [sent]}, fault_logs={}, charges=charges)
    plan = plan_make(seed=1, tasks=1, run="unused")
    figures = audit_journal(plan=plan, task_ids=[str(task.pk)], ledgers=honest, hits=[])
    # No agent is answered here (the mcp harness's figure): None, as "cannot tell", not 0.
    told = {name for name in MUST_BE_ZERO if name not in ("business_duplicates", "untrue_answers")}
    assert {name: figures[name] for name in told} == dict.fromkeys(told, 0)
    assert figures["untrue_answers"] is None
    # The same charge twice under the step's key, as a retry after the key died would do.
    twice = Ledgers(
        entries={"payments": [paid, {**paid, "object_id": "pi_again"}], "mail": [sent]},
        fault_logs={},
        charges=charges,
    )
    figures = audit_journal(plan=plan, task_ids=[str(task.pk)], ledgers=twice, hits=[])
    assert figures["duplicates"] == 1 and figures["journal_mismatch"] == 1
    # Its summary names one charge; the provider shows two.
    assert figures["untrue_summaries"] == 1, figures["examples"]
    assert "does not mention charge_customer pi_again" in figures["examples"]["untrue_summaries"][0]


def _flagged(task: str, *, on_purpose: bool) -> dict[str, Any]:
    reason = "step ao:x:1 (charge_customer): the provider refused us (421)"
    return {"task": task, "code": "misconfigured", "reason": reason, "on_purpose": on_purpose}


def test_a_task_left_to_a_person_fails_the_run_unless_the_plan_meant_it() -> None:
    zeros: dict[str, Any] = dict.fromkeys(MUST_BE_ZERO, 0)
    passing = {**zeros, "needs_human_on_purpose": 0, "needs_human_expected": 0, "flagged": []}
    assert verdict(passing) == []
    # Every task handed to a person, none on purpose: the regression the criterion catches.
    everyone = {**passing, "needs_human": 30, "flagged": [_flagged("t1", on_purpose=False)]}
    [why] = verdict(everyone)
    assert why.startswith("needs_human is 30, not 0: tasks need a person that the plan did not")
    assert "t1 [misconfigured] step ao:x:1" in why
    # A refusal the plan makes on purpose is expected, exactly.
    meant = {**passing, "needs_human_on_purpose": 1, "needs_human_expected": 1}
    assert verdict(meant) == []
    assert verdict({**meant, "needs_human_on_purpose": 0}) == [
        "needs_human_on_purpose is 0: the plan refuses us for 1 charge(s), and each such "
        "task, and only it, must be left to a person"
    ]
    assert verdict({**passing, "unknown_open": 2})[0].startswith("unknown_open is 2, not 0")


def test_manage_py_chaos_exits_non_zero_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    figures: dict[str, Any] = {
        **dict.fromkeys(MUST_BE_ZERO, 0),
        "needs_human": 1,
        "flagged": [_flagged("t1", on_purpose=False)],
        "needs_human_on_purpose": 0,
        "needs_human_expected": 0,
        "seed": 1,
        "harness": "safe",
        "tasks": 1,
        "steps": 1,
        "intended_effects": 1,
        "provider_effects": 0,
        "outcomes": {"needs_human": 1},
        "faults_injected": {},
        "recovery_s": {},
        "wall_s": 1.0,
        "workdir": "var/chaos/x",
    }
    figures["failed"] = verdict(figures)
    figures["ok"] = False
    monkeypatch.setattr("devtools.management.commands.chaos.chaos_run", lambda **_: figures)
    out, err = io.StringIO(), io.StringIO()
    command = Command(stdout=out, stderr=err)
    options = vars(command.create_parser("manage.py", "chaos").parse_args(["--json"]))
    with pytest.raises(SystemExit) as exited:
        command.execute(**{**options, "skip_checks": True})
    assert exited.value.code == 1
    assert json.loads(out.getvalue().strip().splitlines()[-1])["ok"] is False
    assert "chaos run failed: needs_human is 1, not 0" in err.getvalue()


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


def test_the_readme_s_chaos_figures_are_the_runs_own() -> None:
    runs = runs_load()
    assert {(r["harness"], r["seed"]) for r in runs} == {
        (h, n) for h in ("safe", "naive") for n in (1, 2, 3, 4, 5)
    }
    assert readme_block((REPO / "README.md").read_text()) == render(runs), (
        "README.md's chaos figures are not docs/chaos/*.json's: run "
        "`.venv/bin/python -m devtools.chaos.figures --write README.md`"
    )
    for run in runs:
        assert run["ok"] is (run["harness"] != "naive"), (run["harness"], run["seed"])
        # A run that records its code (since the mcp harness: the other harnesses' figures
        # predate the record) ran a commit's code, with nothing changed or added beside it.
        if run["harness"] == "mcp" or "code" in run:
            assert run["code"]["clean"] is True and len(run["code"]["commit"]) == 40, run["code"]


@pytest.mark.stack("postgres", "redis")  # the run restarts both
@pytest.mark.timeout(300)  # some 25 s alone: thirty tasks, real workers, faults, restarts
def test_a_small_chaos_run_repeats_nothing_loses_nothing_and_asks_nobody_unmeant(
    tmp_path: Path,
) -> None:
    redis = quiet_world()
    try:
        figures = chaos_run(tasks=30, seed=1, workers=2, workdir=tmp_path, out=None, refusals=1)
    finally:
        connections.close_all()  # PostgreSQL was restarted under this process
        redis.flushdb()
    assert figures["failed"] == [], json.dumps(figures.get("examples"), indent=1)
    assert figures["ok"] is True
    assert sum(figures["outcomes"].values()) == figures["tasks"] == 30
    # The charge the provider refused us for left its task, and only it, to a person...
    [flagged] = figures["flagged"]
    assert flagged["on_purpose"] is True and flagged["code"] == "misconfigured"
    assert figures["needs_human_on_purpose"] == figures["needs_human_expected"] == 1
    # ...and had the plan not meant it, the run would have failed, saying which task and why.
    [why] = verdict(
        {**figures, "needs_human_expected": 0, "needs_human_on_purpose": 0}
        | {
            "needs_human": 1,
            "flagged": [{**flagged, "on_purpose": False}],
        }
    )
    assert flagged["task"] in why and "[misconfigured]" in why
    assert figures["business_duplicates_by_cause"] == {
        "from_faults": 0,
        "asked_twice": 0,
        "wrong_object": 0,
    }
    injected = figures["faults_injected"]
    for kind in ("worker_sigkill", "worker_sigstop"):
        assert injected.get(kind, 0) >= 1, (kind, injected)
    for server in ("postgres", "redis"):
        done = injected.get(f"{server}_restart", 0)
        skipped = figures["faults_skipped"].get(f"{server}_restart", 0)
        assert (done, skipped) == (1, 0), (server, figures)
    assert injected.get("misdirected") == 1
    assert sum(injected.values()) > 20
    assert figures["provider_effects"] > 30


# --- The mcp harness -----------------------------------------------------------------------------


def test_the_mcp_agent_asks_for_intents_and_misspells_them_as_models_do() -> None:
    plan = plan_make(seed=2, tasks=40, run="r")
    renewal = next(t for t in plan.tasks if t.kind == "renewal")
    batch = next(t for t in plan.tasks if t.kind == "reminders")
    trip = next(t for t in plan.tasks if t.kind == "trip")
    [charge] = mcp.asks_of(renewal)
    assert (charge.intent, charge.object) == ("charge_invoice", f"charge:{renewal.refs['invoice']}")
    assert [a.object for a in mcp.asks_of(batch)] == [
        f"email:reminder:{i['reminder']}:{i['invoice']}" for i in batch.refs["invoices"]
    ]
    assert mcp.asks_of(trip) == []  # no intent carries a trip: not offered over MCP
    seeded = mcp.invoices_of(plan.tasks)
    assert len({i["number"] for i in seeded}) == len(seeded)  # each invoice once
    assert {"number": renewal.refs["invoice"], "amount_due": renewal.refs["amount"]}.items() <= (
        next(i for i in seeded if i["number"] == renewal.refs["invoice"]).items()
    )
    # Every spelling is the same intent to the server (its key), except "Invoice INV-…",
    # which its schema refuses; lower case is found by its key, not by the invoice's lookup.
    for ask in (charge, mcp.asks_of(batch)[0]):
        intent = intent_get(ask.intent)
        honest = intent_asked(intent, ask.args)
        assert isinstance(honest, Asked)
        for how in mcp.SPELLINGS:
            asked = intent_asked(intent, mcp.spelt(ask.args, how))
            if how == "prefixed":
                assert not isinstance(asked, Asked), asked
            else:
                assert isinstance(asked, Asked) and asked.key == honest.key, (how, asked)
    assert mcp.spelt({"invoice": "INV-r-1"}, "wide")["invoice"] == "ＩＮＶ-r-1\u200b"


def _replay(seed: int) -> tuple[list[Any], list[str]]:
    """The agent's choices for a reminder batch told, for each invoice: unknown, nothing (the
    connection dropped), an error, unknown again, then done — without a server."""
    spec = TaskSpec(
        7,
        "reminders",
        "g",
        {
            "invoices": [
                {"invoice": f"INV-r-{j}", "email": "a@b.ch", "reminder": 2} for j in range(3)
            ]
        },
    )
    agent = mcp.Agent(
        url="http://unused", tokens={}, model=mcp.AgentModel(seed=seed, rate=0.6), run="r"
    )
    conversation = mcp.Conversation("r-7", spec, mcp.asks_of(spec), "a")
    conversation.keys[0] = "k-0"
    told = [("answer", "unknown"), ("dropped", None), ("error", None), ("answer", "unknown")]
    told += [("answer", "done")]
    trail: list[Any] = []
    for index, ask in enumerate(conversation.asks):
        memory = mcp.Memory()
        for count, (outcome, status) in enumerate(told, start=1):
            call = mcp.Call(
                conversation=conversation.name,
                n=7,
                index=index,
                intent=ask.intent,
                object=ask.object,
                tool=ask.intent,
                args=dict(ask.args),
                client="a",
                session=1,
                slip=None,
                started=0.0,
                outcome=outcome,
                status=status,
                reference=f"ao:t:{index}" if status else None,
            )
            todo = agent._next(conversation, index, ask, memory, call, count)
            trail.append(todo)
            if todo is None:
                break
    return trail, conversation.slips


def test_the_mcp_agent_misbehaves_replayably_and_within_bounds() -> None:
    model = mcp.AgentModel(seed=3)
    picks = [
        model.next(f"s{i}", mcp.UNKNOWN, 0, reference=True, earlier_key=True) for i in range(400)
    ]
    assert picks == [
        model.next(f"s{i}", mcp.UNKNOWN, 0, reference=True, earlier_key=True) for i in range(400)
    ]
    # Told unknown, it follows up on the reference, or slips in every way a model does.
    assert set(picks) == {mcp.CHECK, mcp.REPHRASE, mcp.FORGET, mcp.TWICE, mcp.KEY_REUSE}
    assert 0.25 < sum(p != mcp.CHECK for p in picks) / len(picks) < 0.45
    other = [
        mcp.AgentModel(seed=4).next(f"s{i}", mcp.UNKNOWN, 0, reference=True, earlier_key=True)
        for i in range(400)
    ]
    assert other != picks
    # Corrected often enough, it behaves; without a reference it asks again; refused, it
    # corrects itself; told done, it moves on (or asks once more).
    assert {
        model.next(f"s{i}", mcp.UNKNOWN, model.most, reference=True, earlier_key=True)
        for i in range(200)
    } == {mcp.CHECK}
    assert {
        model.next(f"s{i}", mcp.DROPPED, model.most, reference=False, earlier_key=False)
        for i in range(200)
    } == {mcp.AGAIN}
    assert {
        model.next(f"s{i}", mcp.REFUSED, 0, reference=True, earlier_key=True) for i in range(50)
    } == {mcp.CORRECT}
    assert {
        model.next(f"s{i}", mcp.DONE, 0, reference=True, earlier_key=True) for i in range(400)
    } == {
        mcp.NEXT,
        mcp.CONFIRM,
    }
    # A whole conversation's choices replay from the seed, and its slips stay within bounds.
    trail, slips = _replay(1)
    assert (trail, slips) == _replay(1) and _replay(2) != (trail, slips)
    assert 0 < len(slips) <= mcp.AgentModel(seed=1).most
    made = [t for t in trail if t is not None]
    assert any(t.tool == "check_effect" for t in made)  # it followed a reference up
    slipped = [t for t in made if t.slip is not None]
    assert {t.slip for t in slipped} <= set(mcp.SLIPS) and slipped


def test_every_answer_the_mcp_agent_got_is_set_against_the_ledgers() -> None:
    pay = {"metadata": {"invoice": "INV-1"}}
    reminder = {"X-Agentops-Reference": "INV-2", "X-Agentops-Purpose": "reminder 1"}
    ledgers = Ledgers(
        entries={
            "payments": [
                _row("payment_intents.create", 1, "ao:t:1", "pi_1", params=pay, status="succeeded")
            ],
            "mail": [_row("messages.send", 2, "ao:u:1", "msg_1", params={"headers": reminder})],
        },
        fault_logs={},
        charges={"ch_1": "pi_1"},
    )
    steps = {
        "ao:t:1": Step(key="ao:t:1", tool="charge_customer", state=StepState.DONE),
        "ao:u:1": Step(key="ao:u:1", tool="send_email", state=StepState.DONE),
        "ao:v:1": Step(key="ao:v:1", tool="charge_customer", state=StepState.UNKNOWN),
    }

    def call(tool: str, obj: str, started: float, **told: Any) -> mcp.Call:
        return mcp.Call(
            "c", 1, 0, tool, obj, tool, {}, "a", 1, None, started, outcome="answer", **told
        )

    charge, sent = "charge:INV-1", "email:reminder:1:INV-2"
    true = [
        call(
            "charge_invoice",
            charge,
            3,
            status="done",
            reference="ao:t:1",
            evidence={"charge": "ch_1"},
        ),
        call(
            "send_payment_reminder",
            sent,
            3,
            status="done",
            reference="ao:u:1",
            evidence={"message": "msg_1"},
        ),
        call("charge_invoice", " inv-1", 0.5, status="unknown", reference="ao:t:1"),
        # Before the charge was made, "not found" (a misspelling) was true: nothing stood.
        call("charge_invoice", charge, 0.5, status="not_done", refused="not_found"),
        # A wrong call (its arguments) names no object and did nothing.
        call(
            "charge_invoice",
            charge,
            9,
            status="not_done",
            refused="invalid_arguments",
            is_error=True,
        ),
        call(
            "effects_for",
            charge,
            9,
            status="listed",
            found=[
                {"status": "done", "reference": "ao:t:1", "evidence": {"payment_intent": "pi_1"}}
            ],
        ),
    ]
    assert answers_untrue(calls=true, ledgers=ledgers, steps=steps, final={}) == []
    untrue = [
        call(
            "charge_invoice",
            charge,
            3,
            status="done",
            reference="ao:t:1",
            evidence={"charge": "ch_9"},
        ),
        call("charge_invoice", charge, 5, status="not_done", refused="record_unreadable"),
        call("charge_invoice", "charge:INV-3", 5, status="unknown", reference="ao:v:1"),
        call("charge_invoice", "charge:INV-4", 5, status="unknown"),
        mcp.Call(
            "c",
            1,
            0,
            "charge_invoice",
            charge,
            "charge_invoice",
            {},
            "a",
            1,
            None,
            6,
            outcome="error",
            reason="MCP error -32603: Internal server error",
        ),
    ]
    found = answers_untrue(
        calls=untrue, ledgers=ledgers, steps=steps, final={"charge:inv-4": "unknown"}
    )
    assert len(found) == 5, found
    assert "does not name pi_1" in found[0]
    assert "pi_1 stood on charge:INV-1 since 1.00" in found[1]
    assert "ao:v:1 was never settled (unknown)" in found[2]
    assert "the intent's effect was never settled" in found[3]
    assert "an error, not one of the three states: MCP error -32603" in found[4]


@pytest.mark.stack("postgres", "redis")  # the run restarts both
@pytest.mark.timeout(300)  # some 30 s alone: the MCP server, real workers, faults, restarts
def test_a_small_mcp_chaos_run_tells_its_agent_only_the_truth(tmp_path: Path) -> None:
    redis = quiet_world()
    try:
        figures = chaos_run(tasks=30, seed=1, workers=2, harness="mcp", workdir=tmp_path, out=None)
    finally:
        connections.close_all()  # PostgreSQL was restarted under this process
        redis.flushdb()
    assert figures["failed"] == [], json.dumps(figures.get("examples"), indent=1)
    for name in MUST_BE_ZERO:
        assert figures[name] == 0, (name, figures["examples"])
    assert figures["untrue_answers"] == 0 and figures["code"]["commit"]
    # Every conversation was answered (no trip: they have no intent), through the server
    # as production runs it, killed once mid-run.
    assert figures["tasks"] == 30 - figures["world"]["not_offered"]
    assert figures["intents"] >= figures["tasks"]
    answers = figures["mcp_answers"]
    assert answers["done"] >= figures["intents"] and not answers.get("error")
    injected = figures["faults_injected"]
    assert injected["mcp_server_kill"] == 1 and injected["postgres_restart"] == 1
    assert figures["model_slips"]
    assert sum(figures["outcomes"].values()) >= figures["intents"]
