"""docs/benchmarks.md's figures are the runs' own (docs/bench/*.json), rendered, never typed:
a figure changed by hand, or a run replaced without rendering it again, fails here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devtools.bench.figures import (
    FIGURES_DIR,
    _drift,
    readme_block,
    render,
    runs_load,
    soaks_load,
    table_budget,
    table_e2e,
    table_paths,
    table_ratios,
    table_step,
)
from devtools.bench.stats import SOAK_THROUGHPUT_TARGET, soak_drift

PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def test_the_benchmarks_pages_figures_are_the_runs_own() -> None:
    bench, soak = runs_load()
    assert bench["kind"] == "bench" and soak is not None and soak["kind"] == "soak"
    for run in (bench, soak):
        assert len(run["code"]["commit"]) == 40, run["code"]
        assert not run["code"]["uncommitted_changes"], (
            f"a run in {FIGURES_DIR} measured code that was not committed: run it again"
        )
    earlier = soaks_load()
    for run in earlier:
        assert run["kind"] == "soak" and not run["code"]["uncommitted_changes"], run["began"]
    assert readme_block(PAGE.read_text()) == render(bench, soak, earlier), (
        "docs/benchmarks.md's figures differ from docs/bench/: "
        "python -m devtools.bench.figures --write docs/benchmarks.md"
    )


def test_a_target_is_reported_as_measured() -> None:
    """A target is met when every measure of it meets it (the rate, and the CPU a step where
    it is judged by that too), and the page says the run's verdict."""
    bench, soak = runs_load()
    for name, target in bench["targets"].items():
        measures = [target["measured"], target.get("measured_cpu")]
        meets = all(m >= target["target"] for m in measures if m is not None)
        assert not target["met"] or meets, name
        assert target["met"] == (target.get("verdict", "met" if meets else "") == "met"), name
    assert soak is not None
    ratio = soak["summary"]["throughput_last5_over_first5"]
    verdict = "met" if ratio >= SOAK_THROUGHPUT_TARGET else "not met"
    # Three decimals: 0.948 is not met, and does not read as 0.95.
    assert f"throughput {ratio:.3f}× (target ≥ 0.95: **{verdict}**)" in PAGE.read_text()


def test_repeated_end_to_end_runs_show_their_count_and_range() -> None:
    """A run that measured each worker count several times: its table says of how many runs
    the figures are the medians, and each count's slowest and fastest of them."""
    bench, _ = runs_load()
    run = {
        **bench,
        "options": {**bench["options"], "e2e_repeat": 3},
        "e2e_tasks_per_s": {"1_worker": 51.6, "2_workers": 91.8},
        "e2e_tasks_per_s_runs": {"1_worker": [51.6, 47.2, 55.0], "2_workers": [88.3, 91.8, 97.4]},
    }
    table = table_e2e(run)
    assert "3 runs on each worker count" in table
    assert "| tasks/s, min – max of 3 runs | 47.2 – 55.0 | 88.3 – 97.4 |" in table
    assert "(the last run on 2 workers)" in table
    assert "| tasks/s | 51.6 | 91.8 |" in table  # the medians, as the file has them
    # A run from before repetitions (no runs of its own) renders as it did.
    older = {k: v for k, v in run.items() if k != "e2e_tasks_per_s_runs"}
    older["options"] = {k: v for k, v in run["options"].items() if k != "e2e_repeat"}
    assert "min – max" not in table_e2e(older)
    assert "| tasks/s | 51.6 | 91.8 |" in table_e2e(older)


def _wave(n: int, *, sandbox: float, postgres: float, host: bool = True) -> dict[str, Any]:
    wave: dict[str, Any] = {
        "wave": n,
        "cpu_ms_per_task": {
            "worker": 5.0,
            "postgres": postgres,
            "payments": sandbox,
            "mail": sandbox,
        },
    }
    if host:
        wave.update(
            host_steal_share=0.02 if n <= 5 else 0.05,
            server={"wal_kb_per_task": 11.5, "checkpoints": 1},
        )
    return wave


def test_a_soaks_drift_is_told_beside_what_the_host_alone_moved() -> None:
    """The cost a task grew by in the journal's processes is shown beside the growth of the
    processes whose work does not grow with the journal (the host's drift, and whatever their
    own work moved as they filled up), and the
    hypervisor's steal and the WAL a task wrote, where the run has them."""
    waves = [_wave(n, sandbox=1.0, postgres=4.0) for n in range(1, 21)]
    waves += [_wave(n, sandbox=1.1, postgres=4.8) for n in range(21, 26)]
    drift = soak_drift(waves)
    assert drift["cpu_ms_per_task"]["postgres"] == {"first": 4.0, "last": 4.8, "growth": 0.2}
    assert drift["host_bound_cpu_growth"] == 0.1
    assert drift["host_steal_share"] == {"first": 0.02, "last": 0.05, "growth": 1.5}
    text = _drift(waves)
    assert "PostgreSQL 4.00 → 4.80 (+20.0%)" in text
    assert "+10.0% on average, the host's drift and whatever their own work a task moved" in text
    # PostgreSQL's 4.0 in units of the sandboxes' 1.0, then its 4.8 in units of their 1.1.
    assert drift["over_host_bound"]["postgres"] == {"first": 4.0, "last": 4.364, "growth": 0.091}
    assert "PostgreSQL 4.00 → 4.36 (+9.1%)" in text.split("in units of the sandboxes'")[1]
    assert "The hypervisor took 2.0% → 5.0%" in text
    assert "WAL 11.5 → 11.5 KB a task, 5 checkpoints in the last five waves" in text
    # A run from before these were read: the processes' drift alone.
    older = [
        _wave(w["wave"], sandbox=1.0 if w["wave"] <= 20 else 1.1, postgres=4.0, host=False)
        for w in waves
    ]
    assert soak_drift(older)["host_steal_share"] is None
    assert "hypervisor" not in _drift(older) and "+10.0% on average" in _drift(older)


def test_every_soak_kept_is_listed_with_the_latest() -> None:
    bench, soak = runs_load()
    assert soak is not None
    earlier = soaks_load()
    listed = render(bench, soak, earlier)
    for run in [*earlier, soak]:
        ratio = run["summary"]["throughput_last5_over_first5"]
        assert f"`{run['code']['commit'][:10]}`" in listed and f"{ratio:.2f}×" in listed
    assert "(this one)" in listed


def test_a_bench_run_tells_the_hypervisors_steal_where_it_read_it() -> None:
    bench, _ = runs_load()
    steal = {"median": 0.031, "min": 0.012, "max": 0.094, "values": [0.012, 0.031, 0.094]}
    run = {
        **bench,
        "host_steal_share": steal,
        "e2e_host_steal_share": {"1_worker": steal, "2_workers": {**steal, "median": 0.05}},
    }
    assert (
        "The hypervisor took 3.1% (1.2% – 9.4%) of the machine's CPU time for others during "
        "the rounds." in table_ratios(run)
    )
    assert "3.1% (1.2% – 9.4%) on 1 worker, 5.0% (1.2% – 9.4%) on 2 workers" in table_e2e(run)
    # A run that did not read it (or on a kernel that does not say) tells nothing of it (nor
    # judges its window by it: an older run).
    unread = {
        k: v
        for k, v in bench.items()
        if k not in ("host_steal_share", "e2e_host_steal_share", "window")
    }
    assert "hypervisor" not in table_ratios(unread) + table_e2e(unread)


def test_a_bench_run_tells_how_many_ranges_the_journal_held() -> None:
    """A step's statements lock every range of the tables they touch: the table says how many
    the run's journal had, and why that many (older runs, which did not say, say nothing)."""
    bench, _ = runs_load()
    kept = table_paths(
        {**bench, "journal_ranges": {"keep_seconds": 90 * 86_400.0, "ranges_per_table": 19}}
    )
    assert "a journal of 19 ranges a table (the default range included), as a deployment " in kept
    assert "that keeps it 90 days holds them" in kept
    soaked = table_paths({**bench, "journal_ranges": {"keep_seconds": 30.0, "ranges_per_table": 6}})
    assert "that keeps it 30 s holds them" in soaked  # not "0 days", nor "kept for good"
    fresh = table_paths({**bench, "journal_ranges": {"keep_seconds": None, "ranges_per_table": 8}})
    assert "8 ranges a table (the default range included), as a fresh database has" in fresh
    old = {k: v for k, v in bench.items() if k != "journal_ranges"}
    assert "ranges a table" not in table_paths(old)


def test_a_bench_run_judges_each_target_on_the_rate_and_the_cpu_a_step() -> None:
    """The ratios of the CPU a step (the part's over the production path's, in the runner and
    PostgreSQL) stand beside the ratios of rates, each with its target; the verdict is the
    run's own; the CPU each part cost is a table of its own; and the window is said to be
    quiet, or too noisy to judge a rate by and why. A run from before any of it says none."""
    bench, _ = runs_load()
    ratio = {"median": 0.52, "ci95": [0.49, 0.56], "min": 0.47, "max": 0.58}
    cpu = {"median": 2.61, "ci95": [2.5, 2.7], "min": 2.4, "max": 2.8}

    def figures(median: float) -> dict[str, Any]:
        return {"median": median, "ci95": [median, median], "min": median, "max": median}

    run = {
        **bench,
        "ratios": {
            **bench["ratios"],
            "production_to_floor_cpu": ratio,
            "production_to_dbos_sequential_cpu": cpu,
        },
        "targets": {
            **bench["targets"],
            "production_to_floor": {"target": 0.5, "met": False, "verdict": "not met"},
            "production_to_dbos_sequential": {
                "target": 2.5,
                "met": False,
                "verdict": "too noisy to judge",
            },
        },
        "cpu_us_per_step": {
            "floor": {"runner": figures(120.0), "postgres": figures(260.0)},
            "production": {
                "runner": figures(380.0),
                "postgres": figures(400.0),
                "provider": figures(30.0),
            },
            "dbos_sequential": {"runner": figures(1300.0), "postgres": figures(500.0)},
        },
        "window": {
            "quiet": False,
            "why": ["it took 12.0% in one round (more than 10%)"],
            "thresholds": {"steal_median": 0.03, "steal_max": 0.1, "commit_spread": 3.0},
        },
    }
    told = table_ratios(run)
    assert (
        "| floor ÷ production, CPU a step (the runner and PostgreSQL) | 0.52 | 0.49–0.56 | ≥ 0.5 |"
    ) in told
    assert "| DBOS sequential ÷ production, CPU a step (the runner and PostgreSQL) | 2.61 |" in told
    assert (
        "Judged on the rate and the CPU a step together: 0.5× the floor: **not met**; 2.5× DBOS "
        "sequential: **too noisy to judge**. The window was too noisy to judge a rate by: it "
        "took 12.0% in one round (more than 10%)."
    ) in told
    assert "| the honest floor | 120 | 260 | — | 380 |" in told
    assert "| **the production path** | 380 | 400 | 30 | 780 |" in told
    assert "| DBOS Transact, sequential | 1,300 | 500 | — | 1,800 |" in told
    quiet = table_ratios({**run, "window": {**run["window"], "quiet": True, "why": []}})
    assert "The window was quiet enough to judge a rate by (the hypervisor's steal at most 3%" in (
        quiet
    )
    old = {k: v for k, v in bench.items() if k not in ("cpu_us_per_step", "window")}
    old["ratios"] = {k: v for k, v in bench["ratios"].items() if not k.endswith("_cpu")}
    assert "CPU a step (the runner" not in table_ratios(old)
    assert "The window" not in table_ratios(old)


def test_a_bench_run_tells_how_its_production_path_logged() -> None:
    """A line a step event costs the production path what it costs a worker: the table says
    at which level the run's own process logged (older runs, which did not say, say nothing)."""
    bench, _ = runs_load()
    measurement = {**bench["measurement"], "log_level": "INFO", "log_format": "json"}
    told = table_paths({**bench, "measurement": measurement})
    assert told.split(":")[0].endswith(
        "the production path's process logging at `INFO` (json) to a file"
    )
    quiet = {k: v for k, v in bench["measurement"].items() if not k.startswith("log_")}
    assert "logging at" not in table_paths({**bench, "measurement": quiet})


def test_a_bench_run_tells_where_a_steps_time_went() -> None:
    """Beside the ratios: the step, the two things every step makes at their cheapest (the
    probes), the rest (an upper bound of the harness's own work), the harness's share each
    target would leave, and the CPU each process spent, all from the run's own file."""
    bench, _ = runs_load()
    budget = {
        "step": 1250.0,
        "commit_and_round_trip": 200.0,
        "provider_exchange": 150.0,
        "harness": 900.0,
        "step_at_floor_target": 1100.0,
        "step_at_dbos_target": 1000.0,
    }
    run = {**bench, "step_budget_us": budget}
    table = table_budget(run)
    assert "| a step of the production path (the inverse of its median rate) | 1,250 |" in table
    assert "**the rest**, which the harness's own work is at most" in table and "| 900 |" in table
    assert "| a step at 2.5× DBOS sequential would take | 1,000 |" in table
    assert "could take 750 µs a step, and at 2.5× DBOS 650 µs; it took at most 900 µs." in table
    assert "The CPU a step cost" not in table  # a run that did not read it
    # A target the commit and the exchange alone exceed leaves the harness nothing.
    tight = {**run, "step_budget_us": {**budget, "step_at_dbos_target": 300.0}}
    assert "and at 2.5× DBOS nothing;" in table_budget(tight)
    cores = bench["machine"]["cores"]
    with_cpu = {
        **run,
        "production_cpu_us_per_step": {"tick_us_per_step": 5.0},
        "step_budget_us": {
            **budget,
            "runner_cpu": 603.0,
            "postgres_cpu": 698.0,
            "provider_cpu": 82.0,
        },
    }
    told = table_budget(with_cpu)
    assert "each good to 5 µs" in told
    assert "the runner's 600 µs" in told and "PostgreSQL's 700 µs" in told
    assert "the provider's 80 µs" in told and f"the machine's {cores} cores" in told
    # A server elsewhere: its CPU is not said, and why.
    remote = {
        **run,
        "production_cpu_us_per_step": {"postgres_not_read": "the server runs elsewhere"},
        "step_budget_us": {**budget, "runner_cpu": 600.0, "provider_cpu": 80.0},
    }
    assert "PostgreSQL's not read (the server runs elsewhere)" in table_budget(remote)
    # A run from before the probe renders none of it.
    older = {k: v for k, v in run.items() if k != "step_budget_us"}
    assert table_budget(older) == ""


def test_a_steps_cpu_near_its_tasks_start_and_end_is_shown_when_measured() -> None:
    bench, _ = runs_load()
    per = {k: v for k, v in bench["per_step"].items() if k != "runner_cpu_us"}
    assert "runner's own CPU" not in table_step({**bench, "per_step": per})  # not measured
    grown = {**per, "runner_cpu_us": {"window": 40, "tasks": 5, "first": 812.4, "last": 1530.0}}
    text = table_step({**bench, "per_step": grown})
    assert (
        "The runner's own CPU a step, in a 200-step task: 812 µs from step 2, 1,530 µs over its "
        "last 40 (medians of 40 steps, of 5 tasks)."
    ) in text


def test_the_readmes_sizing_is_the_benchmarks_own() -> None:
    """Issue 36: what one PostgreSQL core carries, in the README, rendered from bench.json."""
    from devtools.bench.figures import SIZING_BEGIN, SIZING_END, sizing

    bench, _ = runs_load()
    readme = (PAGE.parent.parent / "README.md").read_text()
    block = readme_block(readme, SIZING_BEGIN, SIZING_END)
    assert block == "\n\n".join([SIZING_BEGIN, sizing(bench), SIZING_END]), (
        "the README's sizing differs from docs/bench/bench.json: "
        "python -m devtools.bench.figures --write README.md"
    )
    one = (
        bench["e2e_tasks_per_s"]["1_worker"] * bench["e2e_cpu_ms_per_task"]["1_worker"]["postgres"]
    )
    assert f"| {1000 / one:.1f} |" in block  # workers a core holds: 1000 ms over theirs
