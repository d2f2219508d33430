"""The chaos run (issues 12, 16): its plan (the seeded tasks and faults, the world's
settings per harness) and its model (the playbooks, slipping as models do).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import stripe

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
from devtools.chaos.plan import REFUSAL, World, plan_make
from journal.outcomes import StepState
from journal.protocols import Call, Refusal, StepFact, TaskFacts

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")


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


def test_the_world_s_keys_outlive_the_reconciliation_the_product_checks_for() -> None:
    # The run ends with nobody asked that the plan did not mean: the product's own start-up
    # check says whether a step left unknown by a long outage is still retried with its key
    # when the outage ends, or given to a person (W105), and E105 whether a key may die under
    # a request that carries it. Asked of the settings the run gives its workers.
    said = _checked(World())
    assert "agentops.W105" not in said and "agentops.E105" not in said, said
    # ...and it would say so of the keys the world once had (mail's died in CI).
    short = World(key_lifetimes={"payments": 40.0, "mail": 15.0, "bookings": 25.0})
    assert "(agentops.W105) tool send_email: its provider keeps keys 15 s" in _checked(short)


def _checked(world: World) -> str:
    """What ``manage.py check`` says, run with the settings a chaos run gives its workers."""
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "agentops.settings", **world.env("safe")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout + result.stderr


def test_the_naive_harness_keeps_the_stripe_library_s_own_retries() -> None:
    world = plan_make(seed=1, tasks=10, run="r").world
    # stripe 16 retries twice by default (module-level API); agentops tells it not to.
    assert stripe.max_network_retries == 2
    assert world.env("naive")["STRIPE_MAX_NETWORK_RETRIES"] == "2"
    assert world.env("safe")["STRIPE_MAX_NETWORK_RETRIES"] == "0"
    assert world.env("mcp")["STRIPE_MAX_NETWORK_RETRIES"] == "0"  # agentops' own settings


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
