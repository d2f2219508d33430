"""The chaos run's service (:func:`chaos_run`): the world started, the run driven
(:func:`_drive`), the providers' ledgers read, the harness audited, its figures returned.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any, TextIO

import stripe
from django.db import connections
from django.test import override_settings

from devtools.chaos.agent import asks_of
from devtools.chaos.audit import audit_journal, audit_mcp, audit_naive, duplicates_figures
from devtools.chaos.code import code_ran
from devtools.chaos.ledgers import Ledgers, faults_counted
from devtools.chaos.plan import plan_make
from devtools.chaos.report import verdict
from devtools.chaos.run.base import HARNESSES, queue_to_itself
from devtools.chaos.run.details import journals, timelines
from devtools.chaos.run.driver import Driver
from devtools.chaos.run.mcp import agent_start, mcp_owners, model_said
from devtools.chaos.run.progress import Bar
from devtools.chaos.world import World, world_running
from devtools.process import REPO
from devtools.stack.control import restartable_servers

TICK = 0.2
STILL_MOVING = 15.0
"""Past its deadline, a run goes on while tasks still change state this recently."""
NAIVE_SETTLE = 30.0


def chaos_run(
    *,
    tasks: int = 300,
    seed: int = 1,
    harness: str = "safe",
    workers: int = 3,
    workdir: Path | None = None,
    out: TextIO | None = sys.stderr,
    time_limit: float = 540.0,
    refusals: int = 0,
    cluster: bool = False,
    short: bool = False,
) -> dict[str, Any]:
    """Run the chaos run and return its figures (see devtools.chaos.audit); ``ok`` is true
    only when devtools.chaos.report.verdict finds no reason to fail it (``failed``: the
    reasons). ``refusals``: charges the payment provider refuses us for on purpose, each
    leaving its task to a person (devtools.chaos.plan). ``cluster``: the run's PostgreSQL is a
    Patroni cluster that devtools.chaos.cluster started, whose faults the plan adds."""
    if harness not in HARNESSES:
        raise ValueError(f"harness: {harness!r} is not one of {', '.join(HARNESSES)}")
    queue_to_itself()
    began = time.monotonic()
    run = f"s{seed}-{uuid.uuid4().hex[:6]}"
    plan = plan_make(
        seed=seed, tasks=tasks, run=run, refusals=refusals, cluster=cluster, short=short
    )
    workdir = workdir or REPO / "var" / "chaos" / run
    servers = restartable_servers()
    bar = Bar(out, f"chaos seed {seed} {harness}")
    with (
        override_settings(**plan.world.driver_settings()),
        world_running(
            plan=plan, harness=harness, workers=workers, workdir=workdir, cluster=cluster
        ) as world,
    ):
        driver = Driver(plan=plan, harness=harness, world=world, servers=servers)
        if harness == "mcp":
            driver.agent = agent_start(plan, world)
        try:
            driver.arm_providers()
            _drive(driver, bar, time_limit=time_limit, began=began)
        finally:
            if driver.agent is not None:
                driver.agent.stop()
        if not driver.calm:  # every task was over before the fault window closed
            driver.calm_providers()
        world.stop_workers()
        lost = driver.committed_lost() if cluster else None
        if cluster:
            driver.recoveries()
        if harness == "mcp":
            driver.mcp_tasks_find()
        connections.close_all()
        ledgers = Ledgers(
            entries={name: world.admin(name, lambda c: c.ledger()) for name in world.providers},
            fault_logs={
                name: world.admin(name, lambda c: c.fault_log()) for name in world.providers
            },
            charges=_charges(world),
        )
        names = [driver.task_ids.get(s.n, driver.name(s)) for s in plan.tasks]
        if harness == "safe":
            report = audit_journal(
                plan=plan, task_ids=driver.ids, ledgers=ledgers, hits=driver.hits
            )
        elif harness == "mcp":
            assert driver.agent is not None  # noqa: S101
            report = audit_mcp(
                plan=plan,
                task_ids=driver.ids,
                ledgers=ledgers,
                hits=driver.hits,
                calls=driver.agent.calls,
                conversations=driver.agent.conversations,
                kills=driver.mcp_kills,
            )
        else:
            report = audit_naive(
                plan=plan,
                task_names=names,
                directory=world.naive_dir,
                ledgers=ledgers,
                hits=driver.hits,
            )
        samples = report.pop("recovery_samples")
        # The tasks the verdict holds against the run: handed to a person unmeant, or left
        # with a step open (``ao:<task>:<n> (tool) state``).
        held_against = [f["task"] for f in report["flagged"] if not f.get("on_purpose")]
        held_against += [
            _task_of_key(e.split(" ")[0]) for e in report["examples"].get("unknown_open", [])
        ]
        details = {
            "recovery": samples,
            "deaths": driver.deaths,
            "slow": timelines(samples, slower_than=2 * plan.world.lease),
            "held_against": journals(sorted(set(held_against))),
            "began": driver.started,
            "events": [dataclasses.asdict(e) for e in plan.events],
        }
        if driver.agent is not None:
            details["calls"] = [c.as_dict() for c in driver.agent.calls]
        with os.fdopen(
            os.open(workdir / "details.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w"
        ) as kept:
            json.dump(details, kept, indent=1, default=str)
        owners = {task: n for n, task in driver.task_ids.items()}
        if harness == "mcp":
            owners = mcp_owners(plan, driver.ids)
        doubled = duplicates_figures(
            plan=plan, ledgers=ledgers, owner=lambda key: owners.get(_task_of_key(key))
        )
        examples = doubled.pop("examples")
        report.update(doubled)
        if examples:
            report["examples"]["business_duplicates"] = examples
        if lost is not None and lost[1]:
            report["examples"]["committed_lost"] = lost[1]
        if cluster:
            report["cluster"] = {
                "short": short,
                "faults": driver.cluster_faults,
                "versions_deployed": world.version,
            }
        unplanned = [d for d in driver.deaths if not d["killed"] and not d["armed"]]
        world_said = plan.world
        report.update(
            faults_injected=faults_counted(ledgers, driver.process_faults),
            faults_skipped=dict(driver.skipped),
            # The standing conditions, which the fault log counts only when they bite.
            world={
                "tool_timeout_s": world_said.tool_timeout,
                "lease_s": world_said.lease,
                "key_lifetimes_s": world_said.key_lifetimes,
                "search_lag_s": world_said.search_lag,
                "webhooks": {k: v for k, v in world_said.webhook.items() if k != "webhook_seed"},
                "full_hotels": len(plan.full_hotels),
                "held_trips": sum(1 for t in plan.tasks if t.held),
                "asked_twice": sum(
                    1 for t in plan.tasks if t.repeats and (harness != "mcp" or asks_of(t))
                ),
                "not_offered": sum(1 for t in plan.tasks if harness == "mcp" and not asks_of(t)),
                "refused_on_purpose": plan.refusals,
                "stripe_max_network_retries": int(
                    world_said.env(harness)["STRIPE_MAX_NETWORK_RETRIES"]
                ),
                "model": model_said(plan, harness),
            },
            committed_lost=None if lost is None else lost[0],
            approvals=dict(driver.approvals),
            workers=workers,
            worker_restarts=world.started_workers - workers,
            worker_deaths_unplanned=len(unplanned),
        )
    figures = {
        "seed": seed,
        "harness": harness,
        "code": code_ran(),
        **report,
        "wall_s": round(time.monotonic() - began, 1),
        "workdir": str(workdir),
    }
    figures["failed"] = verdict(figures)
    figures["ok"] = not figures["failed"]
    return figures


def _drive(driver: Driver, bar: Bar, *, time_limit: float, began: float) -> None:
    """Start the tasks and fire the faults at their moments, tend the workers, act as the
    operator, calm the providers after the fault window, and return once every task is
    over, or once nothing moved for a while past the deadline, or at the time limit."""
    plan, harness = driver.plan, driver.harness
    t0 = driver.started = time.time()  # the plan's moments count from here
    settle_by = plan.faults_until + (
        NAIVE_SETTLE if harness == "naive" else plan.world.settle_budget
    )
    last_counts: dict[str, int] = {}
    last_change = time.monotonic()
    over = 0
    while True:
        elapsed = time.time() - t0
        driver.submit_due(elapsed)
        driver.fire_due(elapsed)
        driver.tend_workers()
        driver.world.deploy_go_on()  # a rolling deploy under way: its next step
        driver.decide_approvals()
        if not driver.calm and elapsed >= plan.faults_until:
            driver.calm_providers()
        counts = driver.counts()
        if counts and counts != last_counts:
            last_counts, last_change = counts, time.monotonic()
        all_in = len(driver.task_ids) == len(plan.tasks) and driver.fired == len(plan.events)
        over = counts.get("over", 0)
        if harness != "mcp":  # a conversation is over once told; its tasks must end too
            over += counts.get("human", 0)
        faults = sum(driver.process_faults.values())
        note = " · ".join(f"{v} {k}" for k, v in counts.items() if k != "over" and v)
        bar.show(over, driver.total, f"over · {note} · {faults} process faults · {elapsed:.0f}s")
        if all_in and over == driver.total and not counts.get("open"):
            break
        quiet = time.monotonic() - last_change > STILL_MOVING
        if all_in and elapsed > settle_by and quiet:
            break
        if time.monotonic() - began > time_limit:
            break
        time.sleep(TICK)
    bar.show(over, driver.total, "over; auditing", force=True)
    bar.close()


def _task_of_key(key: str) -> str:
    """The task a provider request's key names: ``ao:<task id>:<n>[:undo]`` (the journal's
    step keys) or ``naive:<run>-<n>:<n>:<attempt>``."""
    parts = key.split(":")
    return parts[1] if len(parts) >= 3 else ""


def _charges(world: World) -> dict[str, str]:
    """Each charge's payment (``ch_…`` → ``pi_…``), from the payments provider's own API
    (calm by now; waiting out a "down" the run caused, as :meth:`World.admin` does)."""
    client = stripe.StripeClient(
        world.env["STRIPE_API_KEY"],
        base_addresses={"api": world.providers["payments"].base_url},
        http_client=stripe.RequestsClient(timeout=30),
        max_network_retries=10,
    )
    intents = client.v1.payment_intents.list(params={"limit": 100})
    return {
        str(intent.latest_charge): str(intent.id)
        for intent in intents.auto_paging_iter()
        if intent.latest_charge
    }
