"""The chaos run's mcp harness (issue 18): its agent asking for intents and slipping as
models do, every answer it was given set against the ledgers, and a small run of it through
the MCP server as production runs it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from agentops.effects import intent_get
from agentops.mcp.services import Asked, intent_asked
from devtools.chaos import agent as mcp
from devtools.chaos.audit import answers_untrue
from devtools.chaos.code import PRODUCT
from devtools.chaos.ledgers import Ledgers
from devtools.chaos.plan import TaskSpec, plan_make
from devtools.chaos.report import MUST_BE_ZERO
from devtools.chaos.run import chaos_run
from journal.models import Step
from journal.outcomes import StepState
from tests.agentops.chaos_support import ledger_row
from tests.agentops.workers import quiet_world

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")


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
                ledger_row(
                    "payment_intents.create", 1, "ao:t:1", "pi_1", params=pay, status="succeeded"
                )
            ],
            "mail": [
                ledger_row("messages.send", 2, "ao:u:1", "msg_1", params={"headers": reminder})
            ],
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
    assert figures["customers_not_told"] == figures["customers_told_twice"] == 0  # issue 38
    assert figures["customers_told_wrongly"] == 0
    assert set(figures["code"]["product"]) == set(PRODUCT)  # the trees it ran, recorded
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
