"""A small chaos run (issues 12, 16): the real thing at a tenth of the size — real
worker processes killed and stopped, PostgreSQL crash-restarted and Redis restarted empty
(through the launcher, which started them), providers failing in every way, a model that
slips, one charge the provider refuses us for on purpose, then the journal checked against
the providers' ledgers; and a run refusing to share its queue.
"""

from __future__ import annotations

import json
from pathlib import Path

import django_rq
import pytest
from django.db import connections

from agentops.workers import AgentopsWorker
from devtools.chaos.report import verdict
from devtools.chaos.run import ChaosRefused, chaos_run
from tests.agentops.workers import quiet_world

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")


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
    assert figures["failed"] == [], held_against(tmp_path, figures)
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
    # Issue 38: each customer whose trip was rejected (or undone) was told so, once.
    told = ("customers_not_told", "customers_told_twice", "customers_told_wrongly")
    assert {name: figures[name] for name in told} == dict.fromkeys(told, 0)
    assert figures["customers_owed"] >= 2, figures  # the trips to full hotels were undone
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


def held_against(workdir: Path, figures: dict[str, object]) -> str:
    """What a failed run is held to account for, and the journal of each task concerned,
    beside the faults fired, in seconds since the run began: all a person reading CI's output
    has to go on."""
    lines = [json.dumps(figures.get("examples"), indent=1)]
    details = json.loads((workdir / "details.json").read_text())
    began = details["began"]
    lines += [
        f"  {e['at']:6.2f}s {e['kind']} {e['target']} {e['duration'] or ''}"
        for e in details["events"]
    ]
    deaths = details["deaths"]
    lines += [
        f"  {d['at'] - began:6.2f}s worker {d['slot']} died ({d['code']})" for d in deaths[:20]
    ]
    if len(deaths) > 20:
        lines.append(f"  ... and {len(deaths) - 20} more worker deaths")
    for task, entries in details["held_against"].items():
        lines.append(f"task {task}:")
        for at, kind, actor, data in entries:
            said = json.dumps(data, sort_keys=True)
            lines.append(f"  {at - began:6.2f}s {kind} {actor} {said[:400]}")
    return "\n".join(lines)
