"""The development tools stay out of the product (issue 16).

devtools/ (the launcher, the chaos run, the benchmark, the process helpers) is not in the
wheel, and an import contract keeps agentops, journal and sandbox from importing it
(pyproject.toml). Here, the same at run time: a process started as production starts (its
settings, from the checkout, where devtools is importable) loads the web app, the worker's
job, every management command and every kind's tools, and no module of devtools is loaded.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from devtools.chaos.kill import armed

REPO = Path(__file__).resolve().parents[1]

# Run by `manage.py shell -c`: what gunicorn (the WSGI app), an RQ worker (its command, the
# job, the runner's tools and planner) and every other command load.
_LOAD_THE_PRODUCT = """
import json, sys
from django.core.management import get_commands, load_command_class
import agentops.wsgi, agentops.jobs, agentops.runner
from agentops.kinds import kinds, tools_for
from agentops.planners import planner_get
from journal.models import Task
commands = get_commands()
for name, app in commands.items():
    load_command_class(app, name)
for kind in kinds():
    planner_get(tools_for(Task(kind=kind)))
print(json.dumps({
    "commands": sorted(commands),
    "devtools": sorted(m for m in sys.modules if m.partition(".")[0] == "devtools"),
}))
"""


def _as_production(**extra: str) -> dict[str, list[str]]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentops.settings",
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "PLANNER": "scripted",
        **extra,
    }
    for name in ("AGENTOPS_DEVTOOLS", "AGENTOPS_TOOL_WRAPPERS", "AGENTOPS_CHAOS_KILL"):
        if name not in extra:
            env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", _LOAD_THE_PRODUCT],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_a_production_process_loads_no_development_tool() -> None:
    loaded = _as_production()
    assert loaded["devtools"] == []
    assert {"rqworker", "sweep", "migrate"} <= set(loaded["commands"])
    assert not {"chaos", "bench"} & set(loaded["commands"])


def test_the_development_tools_are_there_only_where_asked_for() -> None:
    # The launcher's `chaos` and `bench` commands install the app with the two commands; a
    # worker the chaos run arms goes through its tool wrapper. Neither is ever the default.
    loaded = _as_production(AGENTOPS_DEVTOOLS="1", **armed("before_call:charge_customer"))
    assert {"chaos", "bench"} <= set(loaded["commands"])
    assert "devtools.chaos.kill" in loaded["devtools"]


def test_a_worker_is_armed_only_with_a_point_and_a_tool_that_exist() -> None:
    assert armed("during_call:send_email") == {
        "AGENTOPS_TOOL_WRAPPERS": "devtools.chaos.kill.dying",
        "AGENTOPS_CHAOS_KILL": "during_call:send_email",
    }
    for wrong in ("during:send_email", "before_call:send_fax", "before_call"):
        with pytest.raises(ValueError, match="AGENTOPS_CHAOS_KILL"):
            armed(wrong)


@pytest.mark.usefixtures("committed")
def test_the_dashboard_benchmark_seeds_history_as_the_tables_owner() -> None:
    """The benchmark writes finished tasks' history in bulk, as their owner (no app role may
    write the journal but through its moves), and the guards' claims follow it."""
    from devtools.bench.dashboard import long_task, seed
    from journal.models import Step

    seed(tasks=20, entries=60)
    task_id = long_task(steps=5)
    assert (
        list(Step.objects.filter(task_id=task_id).values_list("state", flat=True)) == ["done"] * 5
    )


@pytest.mark.usefixtures("committed")
def test_the_benchmarks_commit_probe_commits_what_it_times() -> None:
    """The probe the benchmark reports beside its ratios: each timed INSERT is a
    transaction and a commit of its own (the owner's autocommit connection)."""
    import psycopg

    from devtools.bench import floor
    from tests.databases import owner_connection

    with psycopg.connect(**owner_connection().get_connection_params(), autocommit=True) as conn:
        floor.setup(conn)
        try:
            probe = floor.commit_probe(conn, times=15)
            # Each row's inserting transaction, committed (the row is visible): one each.
            rows = conn.execute(
                "SELECT count(*), count(DISTINCT xmin::text) FROM bench_floor_commit"
            ).fetchone()
        finally:
            conn.execute("DROP TABLE bench_floor_step, bench_floor_entry, bench_floor_commit")
    assert rows == (15, 15)
    assert probe.round_trip_us > 0 and probe.commit_us > 0


def test_the_benchmarks_workers_log_as_production_workers_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The end-to-end figures are a production worker's: its log level and format are the
    product's defaults whatever the benchmark's own environment says (a worker at WARNING
    skips the line a step that a production worker writes)."""
    from devtools.bench.e2e import World, worker_env

    monkeypatch.setenv("LOG_LEVEL", "WARNING")
    monkeypatch.setenv("LOG_FORMAT", "text")
    monkeypatch.setenv("AGENTOPS_DEVTOOLS", "1")
    env = worker_env(World(providers={"MAIL_API_BASE": "http://127.0.0.1:9"}, handles=[]))
    assert not {"LOG_LEVEL", "LOG_FORMAT", "AGENTOPS_DEVTOOLS"} & set(env)
    assert env["MAIL_API_BASE"] == "http://127.0.0.1:9"


def test_the_benchmarks_own_lines_go_to_a_file_kept_only_when_it_fails(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """While `manage.py bench` runs, its process's lines go to a file (the production path it
    measures pays for them as a worker does, and the terminal shows its progress); a warning
    reaches the terminal too, and a run that fails keeps the file and says where."""
    import io
    import logging

    from devtools.management.commands.bench import _lines_to_a_file

    terminal = io.StringIO()
    console = logging.StreamHandler(terminal)
    root, log = logging.getLogger(), logging.getLogger("agentops.steps")
    root.addHandler(console)
    said: list[str] = []
    try:
        with _lines_to_a_file(said.append):
            log.warning("a warning")
            log.error("step ao:t:1 pay: settled done")
        assert terminal.getvalue() == ""  # the console's lines went to the file
        assert "a warning" in capsys.readouterr().err
        assert said == []
        with pytest.raises(RuntimeError), _lines_to_a_file(said.append):
            log.error("step ao:t:2 pay: settled done")
            raise RuntimeError("the run failed")
        [kept] = said
        path = Path(kept.rsplit(" ", 1)[1])
        assert "ao:t:2" in path.read_text() and "ao:t:1" not in path.read_text()
        path.unlink()
        log.error("after the run")
        assert "after the run" in terminal.getvalue()  # the console has its stream back
    finally:
        root.removeHandler(console)


def test_the_benchmarks_exchange_probe_times_the_tools_own_call(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe the benchmark reports beside the commit probe: each timed stretch is one call
    of the bench tool's own, an exchange with the provider that does nothing (which answers
    every one, each key its own object), and the figure is their median in µs."""
    from devtools.bench import production

    calls: list[str] = []
    returned = [False]  # a call has just returned: the next reading of the clock ends it
    real_call = production.PayInvoice.call

    def counted(self: Any, args: Any, *, key: str) -> Any:
        seen = real_call(self, args, key=key)
        calls.append(key)
        returned[0] = True
        return seen

    monkeypatch.setattr(production.PayInvoice, "call", counted)
    # A clock that says each call took 100, 400 or 200 µs in turn: the median is 200 (the mean 233).
    took = iter([100e-6, 400e-6, 200e-6] * 5)
    now = [0.0]

    def clock() -> float:
        if returned[0]:
            returned[0] = False
            now[0] += next(took)
        return now[0]

    with production.noop_provider() as noop:
        settings.BENCH_NOOP_API_BASE = noop.url
        settings.BENCH_NOOP_KEY_LIFETIME_SECONDS = 86_400.0
        monkeypatch.setattr(time, "perf_counter", clock)
        assert production.exchange_probe(times=15) == 200.0
        assert len(calls) == len(set(calls)) == 15
        monkeypatch.undo()
        settings.BENCH_NOOP_API_BASE = "http://127.0.0.1:9"  # nothing listens: it says so
        with pytest.raises(RuntimeError, match="did not answer"):
            production.exchange_probe(times=1)


def test_a_target_is_met_only_by_the_rate_and_the_cpu_a_step_together() -> None:
    """The benchmark's verdicts: a target judged on the CPU a step too is not met when the CPU
    misses it (no disk flatters that), met when both meet it (a quiet window, or the CPU
    confirming a noisy one's rate), and too noisy to judge when a noisy window's rate misses
    it and the CPU does not; end to end is judged on its rate alone."""
    from devtools.management.commands.bench import _targets

    def judged(rate: float, cpu: float | None, *, quiet: bool) -> str:
        ratios: dict[str, Any] = {
            "production_to_floor": {"median": rate},
            "production_to_dbos_sequential": {"median": 3.0},
        }
        if cpu is not None:
            ratios["production_to_floor_cpu"] = {"median": cpu}
        out = {"ratios": ratios, "window": {"quiet": quiet}, "e2e_tasks_per_s": {"2_workers": 99}}
        verdict: str = _targets(out)["production_to_floor"]["verdict"]
        assert _targets(out)["e2e_tasks_per_s_2_workers"]["verdict"] == "not met"
        return verdict

    assert judged(0.6, 0.55, quiet=True) == "met"
    assert judged(0.6, 0.45, quiet=True) == "not met"
    assert judged(0.6, 0.45, quiet=False) == "not met"
    assert judged(0.45, 0.55, quiet=True) == "not met"
    assert judged(0.45, 0.55, quiet=False) == "too noisy to judge"
    assert judged(0.6, 0.55, quiet=False) == "met"
    assert judged(0.6, None, quiet=False) == "too noisy to judge"
    assert judged(0.6, None, quiet=True) == "met"


def test_a_window_is_noisy_by_the_hypervisors_steal_or_the_disk() -> None:
    from devtools.management.commands.bench import window

    assert window([0.001, 0.002, 0.01], [150.0, 200.0, 300.0])["quiet"]
    steady = [150.0, 160.0, 170.0]
    stolen = window([0.04, 0.05, 0.02], steady)
    assert not stolen["quiet"] and "in the median round (more than 3%)" in stolen["why"][0]
    spiked = window([0.001, 0.12, 0.001], steady)
    assert spiked["why"] == ["it took 12.0% in one round (more than 10%)"]
    disk = window([0.0, 0.0], [100.0, 450.0])
    assert disk["commit_spread"] == 4.5 and "4.5 times as much" in disk["why"][0]
    assert window([None, None], steady)["quiet"]  # a kernel that does not say


def test_a_steps_budget_is_the_runs_own_medians() -> None:
    """What docs/benchmarks.md says of where a step's time went is arithmetic on the run's medians:
    the step is its rate's inverse, the rest what is left after the two probes, and each
    target's step this one scaled by the paired ratio over the target (so it lies on the side
    of the target that the verdict does)."""
    from devtools.management.commands.bench import step_budget

    out: dict[str, Any] = {
        "production_steps_per_s": {"median": 800.0},
        "raw_floor_steps_per_s": {"median": 1700.0},
        "dbos_steps_per_s": {"median": 400.0},
        "commit_probe": {"commit_us": {"median": 200.0}},
        "exchange_probe_us": {"median": 150.0},
        "ratios": {
            "production_to_floor": {"median": 0.4},
            "production_to_dbos_sequential": {"median": 2.25},
        },
    }
    budget = step_budget(out)
    assert budget == {
        "step": 1250.0,
        "commit_and_round_trip": 200.0,
        "provider_exchange": 150.0,
        "harness": 900.0,
        "step_at_floor_target": 1000.0,  # 1250 x 0.4 / 0.5: a faster step would meet it
        "step_at_dbos_target": 1125.0,  # 1250 x 2.25 / 2.5
    }
    # With the CPU each process spent a step, where it was read: their medians too.
    out["production_cpu_us_per_step"] = {
        "runner": {"median": 610.0},
        "provider": {"median": 75.0},
        "tick_us_per_step": 5.0,
        "postgres_not_read": "the server runs elsewhere",
    }
    assert step_budget(out) == {**budget, "runner_cpu": 610.0, "provider_cpu": 75.0}


@pytest.mark.usefixtures("committed")
def test_the_benchmark_reads_the_servers_cpu_only_from_its_own_processes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PostgreSQL's CPU a step is read from the server's processes only when they are the
    server's (started when it says it started), and a step's CPU is each process's over the
    steps run; a pid that names another process here is not read, and says why."""
    from devtools.bench import procs, production
    from devtools.management.commands import bench

    roles, unread = bench._production_roles(os.getpid())
    assert unread is None and set(roles.pids) == {"runner", "provider", "postgres"}

    monkeypatch.setattr(procs, "postmaster_pid", lambda: os.getpid())  # not the server
    roles, unread = bench._production_roles(os.getpid())
    assert unread is not None and "elsewhere" in unread
    assert set(roles.pids) == {"runner", "provider"}

    spent = iter([{"runner": 1.0, "provider": 0.5}, {"runner": 1.2, "provider": 0.54}])
    monkeypatch.setattr(roles, "cpu_seconds", lambda: next(spent))
    monkeypatch.setattr(production, "run", lambda ids: 3.0)
    cpu: dict[str, list[float]] = {}
    seconds = bench.Command()._timed(
        lambda: production.run(["t"] * 20), steps=400, roles=roles, cpu=cpu
    )
    assert seconds == 3.0
    assert cpu == {"runner": [500.0], "provider": [100.0]}
