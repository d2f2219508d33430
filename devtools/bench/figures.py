"""The benchmark's figures (docs/benchmarks.md), rendered from the runs' own output, never typed.

``make bench BENCH_ARGS="--out docs/bench/bench.json"`` and ``make soak SOAK_ARGS="--out
docs/bench/soak.json"`` write the runs (an earlier soak is kept in ``docs/bench/soaks/``,
named by when it began, and listed with the latest); ``python -m devtools.bench.figures
--write docs/benchmarks.md`` puts them between the page's markers (``--check
docs/benchmarks.md`` says whether it holds them). A test checks that the page holds exactly
what the files say.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from devtools.bench.stats import HOST_BOUND_ROLES, SOAK_THROUGHPUT_TARGET, soak_drift

FIGURES_DIR = Path(__file__).resolve().parents[2] / "docs" / "bench"
BEGIN = "<!-- bench figures: rendered by python -m devtools.bench.figures; do not edit -->"
END = "<!-- end of bench figures -->"

Run = Mapping[str, Any]


def _n(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "—"
    return f"{value:,.{digits}f}"


def _interval(figures: Mapping[str, Any], digits: int = 0) -> str:
    low, high = figures["ci95"]
    return f"{_n(low, digits)}–{_n(high, digits)}"


def _met(target: Mapping[str, Any]) -> str:
    """A target's verdict as the run judged it (a run from before verdicts: met or not)."""
    verdict = target.get("verdict") or ("met" if target["met"] else "not met")
    return f"**{verdict}**"


def machine_line(run: Run) -> str:
    m, code = run["machine"], run["code"]
    settings = m["postgresql_settings"]
    return (
        f"{m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB ({m['platform']}, Linux "
        f"{m['kernel']}); Python {m['python']}; PostgreSQL {m['postgresql']} (fsync "
        f"{settings['fsync']}, synchronous_commit {settings['synchronous_commit']}, "
        f"shared_buffers {settings['shared_buffers']}); commit `{code['commit'][:10]}`"
        f"{' with uncommitted changes' if code['uncommitted_changes'] else ''}; "
        f"{run['began']} – {run['ended']}"
    )


def _duration(seconds: float) -> str:
    days = seconds / 86_400
    return f"{_n(days)} days" if days >= 2 else f"{_n(seconds)} s"


_COUNTS = {4: "four", 5: "five"}


def table_paths(run: Run) -> str:
    opts = run["options"]
    rows = [
        ("the honest floor: two prepared autocommit statements a step", "raw_floor_steps_per_s"),
        (
            "**the production path**: the RQ job's call, a real kind's rules",
            "production_steps_per_s",
        ),
        ("DBOS Transact, sequential", "dbos_steps_per_s"),
        ("DBOS Transact, concurrent (`start_workflow`)", "dbos_concurrent_steps_per_s"),
    ]
    rows = [(label, name) for label, name in rows if name in run]  # older runs had four
    ranges = run.get("journal_ranges")
    held = ""
    if ranges is not None:
        keep = ranges.get("keep_seconds")
        kept = (
            f"as a deployment that keeps it {_duration(keep)} holds them"
            if keep
            else "as a fresh database has them (the journal is kept for good)"
        )
        held = (
            f", against a journal of {ranges['ranges_per_table']} ranges a table (the default "
            f"range included), {kept}"
        )
    logged = run.get("measurement", {}).get("log_level")
    if logged is not None:
        held += (
            f"; the production path's process logging at `{logged}` "
            f"({run['measurement']['log_format']}) to a file"
        )
    lines = [
        f"{opts['repeat']} rounds of {opts['steps']:,} steps ({opts['per_task']} to a task), each "
        f"round's {_COUNTS.get(len(rows), str(len(rows)))} parts in a shuffled order{held}:",
        "",
        "| path | steps/s (median) | 95% interval | min – max |",
        "|---|---:|---:|---:|",
    ]
    for label, name in rows:
        f = run[name]
        lines.append(
            f"| {label} | {_n(f['median'])} | {_interval(f)} | {_n(f['min'])} – {_n(f['max'])} |"
        )
    return "\n".join(lines)


# The CPU a step, by part and process (bench.cpu_us_per_step), as the table names them.
CPU_PARTS = (
    ("the honest floor", "floor"),
    ("**the production path**", "production"),
    ("DBOS Transact, sequential", "dbos_sequential"),
    ("DBOS Transact, concurrent", "dbos_concurrent"),
)


def table_ratios(run: Run) -> str:
    ratios, targets = run["ratios"], run["targets"]
    rows = [
        ("production ÷ floor, steps/s", "production_to_floor", "production_to_floor"),
        (
            "floor ÷ production, CPU a step (the runner and PostgreSQL)",
            "production_to_floor_cpu",
            "production_to_floor",
        ),
        (
            "production ÷ DBOS sequential, steps/s",
            "production_to_dbos_sequential",
            "production_to_dbos_sequential",
        ),
        (
            "DBOS sequential ÷ production, CPU a step (the runner and PostgreSQL)",
            "production_to_dbos_sequential_cpu",
            "production_to_dbos_sequential",
        ),
        ("production ÷ DBOS concurrent, steps/s", "production_to_dbos_concurrent", None),
    ]
    rows = [row for row in rows if row[1] in ratios]
    lines = [
        "| ratio (paired by round) | median | 95% interval | target |",
        "|---|---:|---:|---|",
    ]
    for label, name, target in rows:
        r = ratios[name]
        goal = f"≥ {targets[target]['target']}" if target else "—"
        lines.append(f"| {label} | {r['median']:.2f} | {_interval(r, 2)} | {goal} |")
    judged = [
        f"{label} {_met(targets[name])}"
        for label, name in (
            ("0.5× the floor:", "production_to_floor"),
            ("2.5× DBOS sequential:", "production_to_dbos_sequential"),
        )
        if name in targets
    ]
    lines += ["", "Judged on the rate and the CPU a step together: " + "; ".join(judged) + "."]
    lines[-1] += _window(run)
    cpu = _cpu_table(run)
    if cpu:
        lines += ["", *cpu]
    probe = run.get("commit_probe")
    if probe is not None:
        trip, commit = probe["round_trip_us"], probe["commit_us"]
        lines += [
            "",
            "In the same rounds, on the floor's connection, a round trip that commits nothing (a "
            f"prepared `SELECT 1`) took {_n(trip['median'])} µs ({_n(trip['min'])} – "
            f"{_n(trip['max'])}) and one that makes a durable commit (a one-row `INSERT` in "
            f"autocommit) {_n(commit['median'])} µs ({_n(commit['min'])} – "
            f"{_n(commit['max'])}), medians of 200 each round: the floor waits for two commits "
            "a step and the production path for one, so where a commit costs more the ratio "
            "to the floor rises, and where it costs less it falls. The CPU a step is not "
            "flattered so.",
        ]
    steal = run.get("host_steal_share")
    if steal is not None:
        lines[-1] += (
            f" The hypervisor took {steal['median']:.1%} ({steal['min']:.1%} – "
            f"{steal['max']:.1%}) of the machine's CPU time for others during the rounds."
        )
    return "\n".join(lines)


def _window(run: Run) -> str:
    """Whether the run's window was quiet enough to judge a rate by, and if not, why."""
    window = run.get("window")
    if window is None:
        return ""  # a run from before it was judged
    limits = window["thresholds"]
    if window["quiet"]:
        return (
            " The window was quiet enough to judge a rate by (the hypervisor's steal at most "
            f"{limits['steal_median']:.0%} in the median round and {limits['steal_max']:.0%} in "
            f"any, a durable commit's cost within {limits['commit_spread']:g}× between rounds)."
        )
    return " The window was too noisy to judge a rate by: " + "; ".join(window["why"]) + "."


def _cpu_table(run: Run) -> list[str]:
    """The CPU a step each part cost, by process (medians, µs), where the run read it."""
    cpu = run.get("cpu_us_per_step")
    if not cpu:
        return []  # a run from before it was measured
    lines = [
        "The CPU a step cost, read from the processes in the same rounds (medians, µs; "
        "PostgreSQL's is all its processes while the part ran):",
        "",
        "| part | the runner's process | PostgreSQL | the provider | runner and PostgreSQL |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, part in CPU_PARTS:
        roles = cpu.get(part)
        if not roles:
            continue

        def median(role: str, roles: Mapping[str, Any] = roles) -> float | None:
            figures = roles.get(role)
            return None if figures is None else float(figures["median"])

        both = [m for m in (median("runner"), median("postgres")) if m is not None]
        lines.append(
            f"| {label} | {_n(median('runner'))} | {_n(median('postgres'))} | "
            f"{_n(median('provider'))} | {_n(sum(both)) if len(both) == 2 else '—'} |"
        )
    return lines


def _allowed(value: float) -> str:
    return f"{_n(value)} µs" if value > 0 else "nothing"


def table_budget(run: Run) -> str:
    """Where a production step's time went (bench.step_budget): the commit and the exchange
    every step makes, at their cheapest here; the rest, which the harness's own work is at
    most; the step each target would allow; and the CPU each process spent a step."""
    budget = run.get("step_budget_us")
    if budget is None:
        return ""
    fixed = budget["commit_and_round_trip"] + budget["provider_exchange"]
    rows = [
        ("a step of the production path (the inverse of its median rate)", budget["step"]),
        (
            "a minimal durable commit with its round trip (the commit probe above)",
            budget["commit_and_round_trip"],
        ),
        (
            "one exchange with the provider that does nothing, as the tool's own client makes "
            "it (200 a round, nothing written)",
            budget["provider_exchange"],
        ),
        (
            "**the rest**, which the harness's own work is at most (its statement's work in "
            "PostgreSQL beyond a minimal commit — the lease, rules, guards, claims and entries "
            "—, its per-task statements, the planner, the checks, the telemetry, its Python)",
            budget["harness"],
        ),
        ("a step at 0.5× the floor would take", budget["step_at_floor_target"]),
        ("a step at 2.5× DBOS sequential would take", budget["step_at_dbos_target"]),
    ]
    lines = [
        "Where a production step's time went in this run (medians, µs; the parts are measured "
        "apart, so they add up only as medians do; a target's step is this step scaled by the "
        "paired ratio above over the target):",
        "",
        "| | µs a step |",
        "|---|---:|",
        *(f"| {label} | {_n(value)} |" for label, value in rows),
        "",
        "Every step makes a durable commit and an exchange with its provider; the probes time "
        "them at their cheapest here (200 at a time, on warm caches), so a step pays them at "
        "least as much and the harness's own work is at most the rest. At 0.5× the floor it "
        f"could take {_allowed(budget['step_at_floor_target'] - fixed)} a step, and at 2.5× "
        f"DBOS {_allowed(budget['step_at_dbos_target'] - fixed)}; it took at most "
        f"{_n(budget['harness'])} µs.",
    ]
    cpu = run.get("production_cpu_us_per_step") or {}
    if "runner_cpu" in budget:

        def tens(value: float) -> str:
            return _n(round(value, -1))

        if "postgres_cpu" in budget:
            server = (
                f"PostgreSQL's {tens(budget['postgres_cpu'])} µs (all its processes while the "
                "production path ran: the statements' work and commits, and whatever the "
                "server did meanwhile in the background), "
            )
        else:
            why = cpu.get("postgres_not_read") or "not read"
            server = f"PostgreSQL's not read ({why}), "
        tick = cpu.get("tick_us_per_step")
        good = f", each good to {_n(tick)} µs: psutil reads the kernel's ticks" if tick else ""
        lines[-1] += (
            " The CPU a step cost, read from the processes in the same rounds (to 10 µs"
            f"{good}): the runner's {tens(budget['runner_cpu'])} µs (the harness's Python, "
            f"psycopg, the HTTP client, its log lines), {server}the provider's "
            f"{tens(budget['provider_cpu'])} µs; the step waits for one while another works, "
            f"and the machine's {run['machine']['cores']} cores share them with the host's "
            "other work."
        )
    return "\n".join(lines)


def table_step(run: Run) -> str:
    per = run["per_step"]
    last = next(k for k in per if k.startswith("step_") and k != "step_2")
    return "\n".join(
        [
            f"| a step, as the server counts it | step 2 | {last.replace('_', ' ')} |",
            "|---|---:|---:|",
            f"| round trips | {per['step_2']['round_trips']} | {per[last]['round_trips']} |",
            f"| commits | {per['step_2']['commits']} | {per[last]['commits']} |",
            "",
            f"WAL per step {_n(per['wal_bytes_per_step'])} bytes; "
            f"{per['hot_update_share']:.0%} of the {per['step_updates']} settlements of the "
            "steps were HOT updates." + _cpu_by_position(per.get("runner_cpu_us"), last),
        ]
    )


def _cpu_by_position(cpu: Mapping[str, Any] | None, last: str) -> str:
    if not cpu:
        return ""  # a run from before it was measured
    steps = last.removeprefix("step_")
    return (
        f" The runner's own CPU a step, in a {steps}-step task: {_n(cpu['first'])} µs from "
        f"step 2, {_n(cpu['last'])} µs over its last {cpu['window']} (medians of "
        f"{cpu['window']} steps, of {cpu['tasks']} tasks)."
    )


ROLES = ("worker", "postgres", "bench", "payments", "mail", "redis")


def table_e2e(run: Run) -> str:
    rates, cpu, latency = run["e2e_tasks_per_s"], run["e2e_cpu_ms_per_task"], run["e2e_latency_ms"]
    target = run["targets"]["e2e_tasks_per_s_2_workers"]
    names = list(rates)
    head = " | ".join(n.replace("_", " ") for n in names)
    # Older runs measured each worker count once; newer ones several times, their medians.
    runs = run.get("e2e_tasks_per_s_runs")
    repeat = len(runs[names[0]]) if runs else None
    lines = [
        f"{run['options']['e2e_tasks']:,} renewals (a charge through the `stripe` library, a "
        "receipt email) from `task_start` to finished, against the sandbox providers"
        + (
            f", {repeat} runs on each worker count (each pair in a shuffled order): medians "
            "of the runs, latencies over all their tasks:"
            if runs
            else ":"
        ),
        "",
        f"| end to end | {head} |",
        "|---|" + "---:|" * len(names),
        "| tasks/s | " + " | ".join(_n(rates[n], 1) for n in names) + " |",
    ]
    if runs:
        lines.append(
            f"| tasks/s, min – max of {repeat} runs | "
            + " | ".join(f"{_n(min(runs[n]), 1)} – {_n(max(runs[n]), 1)}" for n in names)
            + " |"
        )
    lines.append(
        "| latency p50 / p95 / p99, ms | "
        + " | ".join(
            f"{_n(latency[n]['p50'])} / {_n(latency[n]['p95'])} / {_n(latency[n]['p99'])}"
            for n in names
        )
        + " |"
    )
    for role in ROLES:
        label = ROLE_NAMES["bench"] if role == "bench" else role
        lines.append(
            f"| CPU a task, ms: {label} | "
            + " | ".join(_n(cpu[n].get(role), 1) for n in names)
            + " |"
        )
    lines.append(
        "| CPU a task, ms: all | " + " | ".join(_n(sum(cpu[n].values()), 1) for n in names) + " |"
    )
    rss = run["worker_rss_mb"]
    before = ", ".join(f"{v} MB" for v in rss["before"].values())
    after = ", ".join(f"{v} MB" for v in rss["after"].values())
    # What the machine's cores could do at that cost, had no process ever waited.
    most, cores = names[-1], run["machine"]["cores"]
    ceiling = cores * 1000 / sum(cpu[most].values())
    last = f" (the last run on {most.replace('_', ' ')})" if runs else ""
    lines += [
        "",
        f"Target: ≥ {target['target']:.0f} tasks/s on 2 workers: {_met(target)}. At "
        f"{_n(sum(cpu[most].values()), 1)} ms of CPU a task in all, {cores} cores could finish "
        f"at most {_n(ceiling, 1)} tasks/s had no process ever waited; {most.replace('_', ' ')} "
        f"reached {rates[most] / ceiling:.0%} of that. Each worker's memory before and after "
        f"its {rss['tasks']:,} tasks{last}: {before} → {after}.",
    ]
    steals = run.get("e2e_host_steal_share")
    if steals and all(steals.get(n) for n in names):
        lines[-1] += (
            " The hypervisor took "
            + ", ".join(
                f"{steals[n]['median']:.1%} ({steals[n]['min']:.1%} – {steals[n]['max']:.1%}) "
                f"on {n.replace('_', ' ')}"
                for n in names
            )
            + " of the machine's CPU time for others while the runs ran (medians of the runs)."
        )
    return "\n".join(lines)


def table_dashboard(run: Run) -> str:
    pages = run.get("dashboard_ms")
    if not pages:
        return ""
    opts = run["options"]
    lines = [
        f"The operators' pages over {opts['dashboard_tasks']:,} tasks and "
        f"{opts['dashboard_entries']:,} entries:",
        "",
        "| page | queries | p50 | p95 |",
        "|---|---:|---:|---:|",
    ]
    names = {"task_list": "task list", "task_200_steps": "a 200-step task"}
    for name, f in pages.items():
        lines.append(
            f"| {names.get(name, name)} | {f['queries']} | {f['p50']} ms | {f['p95']} ms |"
        )
    return "\n".join(lines)


def table_soak(soak: Run) -> str:
    s, waves = soak["summary"], soak["waves"]
    again = s["retention"]["first_invoice_asked_again"]
    shown = [w for w in waves if w["wave"] in (1, 2, 3, 4, 5) or w["wave"] % 5 == 0]
    lines = [
        f"The soak ({machine_line(soak)}): {len(waves)} waves of "
        f"{soak['options']['wave_tasks']:,} renewals on 2 workers, {s['tasks']:,} in all, the "
        "journal's ranges 20 s wide and kept 30 s (`make soak`):",
        "",
        "| wave | tasks/s | p95 ms | workers MB | payments MB | mail MB | PostgreSQL MB | "
        "tasks in the journal | journal MB (tables + indexes) | dead step rows | HOT | "
        "Redis keys |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for w in shown:
        mem = w["memory_mb"]
        workers = "+".join(f"{v:.0f}" for k, v in mem.items() if k.startswith("worker"))
        size = sum(t["table_mb"] + t["indexes_mb"] for t in w["journal"].values())
        hot = w["step_hot_update_share"]
        lines.append(
            f"| {w['wave']} | {w['tasks_per_s']} | {_n(w['latency_ms']['p95'])} | {workers} | "
            f"{_n(mem.get('payments'))} | {_n(mem.get('mail'))} | {_n(mem.get('postgres'))} | "
            f"{w['retention']['tasks_in_journal']:,} | {size:,.1f} | "
            f"{w['journal']['journal_step']['dead_tuples']:,} | "
            f"{'—' if hot is None else f'{hot:.0%}'} | {w['redis_keys']:,} |"
        )
    lines += [
        "",
        "Last five waves over the first five: throughput "
        f"{s['throughput_last5_over_first5']:.3f}× (target ≥ {SOAK_THROUGHPUT_TARGET:g}: "
        f"**{'met' if s['throughput_last5_over_first5'] >= SOAK_THROUGHPUT_TARGET else 'not met'}"
        "**), "
        f"p95 {_n(s['p95_ms_first5'])} → {_n(s['p95_ms_last5'])} ms; memory first five → last "
        "five: "
        + ", ".join(
            f"{role} {s[f'{role}_mb_first5']} → {s[f'{role}_mb_last5']} MB "
            f"({s[f'{role}_growth']:+.1%})"
            for role in ("worker", "payments", "mail", "postgres", "redis")
            if s.get(f"{role}_growth") is not None
        )
        + ".",
        "",
        _drift(waves),
        "",
        _levelled(waves),
        "",
        f"Retention dropped {s['retention']['dropped_partitions']} ranges, "
        f"{s['retention']['dropped_tasks']:,} tasks, while it ran. The first wave's first "
        f"invoice, renewed again at the end (its first task "
        f"{'still' if again['first_task_in_journal'] else 'no longer'} in the journal): "
        f"charge `{again['state']}` ({again['refusal'] or 'not refused'}), naming "
        f"{', '.join(f'{k} `{v}`' for k, v in (again['first_evidence'] or {}).items())}; "
        f"{again['charges_sent']} charge sent.",
    ]
    return "\n".join(lines)


ROLE_NAMES = {
    "worker": "workers",
    "postgres": "PostgreSQL",
    "redis": "Redis",
    "payments": "payments sandbox",
    "mail": "mail sandbox",
    "bench": "the program starting them",
}


def _drift(waves: Sequence[Run]) -> str:
    """What a task cost each process, first five waves against the last five, beside the cost
    of the roles whose work does not grow with the journal (stats.soak_drift: what moved with
    the host), and, where the run has them, the hypervisor's steal and the WAL a task wrote."""
    drift = soak_drift(waves)
    cpu = drift["cpu_ms_per_task"]

    def moved(role: str) -> str:
        f = cpu[role]
        return (
            f"{ROLE_NAMES.get(role, role)} {f['first']:.2f} → {f['last']:.2f} ({f['growth']:+.1%})"
        )

    grows = [r for r in cpu if r not in HOST_BOUND_ROLES and cpu[r] is not None]
    bound = [r for r in HOST_BOUND_ROLES if cpu.get(r) is not None]
    text = (
        "CPU a task cost, first five waves → last five (ms): "
        + ", ".join(moved(r) for r in grows)
        + "; and where the work does not grow with the journal, "
        + ", ".join(moved(r) for r in bound)
    )
    if drift["host_bound_cpu_growth"] is not None:
        text += (
            f": {drift['host_bound_cpu_growth']:+.1%} on average, the host's drift and whatever "
            "their own work a task moved as they filled up to what they retain"
        )
    over = {r: f for r, f in drift["over_host_bound"].items() if f is not None}
    if over:
        text += (
            ". Wave by wave in units of the sandboxes' CPU a task (what moved theirs taken "
            "out), first five → last five: "
            + ", ".join(
                f"{ROLE_NAMES.get(r, r)} {f['first']:.2f} → {f['last']:.2f} ({f['growth']:+.1%})"
                for r, f in over.items()
            )
        )
    steal = drift["host_steal_share"]
    if steal is not None:
        text += (
            f". The hypervisor took {steal['first']:.1%} → {steal['last']:.1%} of the CPU time "
            "for others"
        )
    wal = drift["wal_kb_per_task"]
    if wal is not None:
        checkpoints = sum((w.get("server") or {}).get("checkpoints", 0) for w in waves[-5:])
        text += (
            f"; WAL {wal['first']:.1f} → {wal['last']:.1f} KB a task, {checkpoints} "
            "checkpoints in the last five waves"
        )
    return text + "."


def _levelled(waves: Sequence[Run]) -> str:
    """Whether the memory that grows at first (the sandboxes fill up to their retention, the
    database its buffers) levels off: each role's highest in the middle third of the waves
    and in the last."""
    third = max(1, len(waves) // 3)
    middle, last = waves[third : 2 * third], waves[2 * third :]

    def peak(rows: Sequence[Run], role: str) -> float:
        return float(
            max(sum(v for k, v in w["memory_mb"].items() if k.startswith(role)) for w in rows)
        )

    parts = [
        f"{role} {peak(middle, role):.0f} → {peak(last, role):.0f} MB"
        for role in ("worker", "payments", "mail", "postgres", "redis")
    ]
    return (
        f"Highest memory in waves {middle[0]['wave']}–{middle[-1]['wave']} and in waves "
        f"{last[0]['wave']}–{last[-1]['wave']} (the sandboxes fill up to what they retain, "
        "then forget as fast as they are asked): " + ", ".join(parts) + "."
    )


def soak_history(soak: Run, earlier: Sequence[Run]) -> str:
    """Every soak kept, oldest first, with this one: its last five waves over its first five,
    beside the sandboxes' CPU a task (what moved with the host) and PostgreSQL's. The soak
    is minutes long on a shared machine: one run alone says little about the code."""
    if not earlier:
        return ""

    def told(run: Run) -> str:
        drift = soak_drift(run["waves"])
        postgres = (drift["cpu_ms_per_task"].get("postgres") or {}).get("growth")
        host = drift["host_bound_cpu_growth"]
        this = " (this one)" if run is soak else ""
        return (
            f"{run['began'][:16].replace('T', ' ')} at `{run['code']['commit'][:10]}`{this}: "
            f"{run['summary']['throughput_last5_over_first5']:.2f}× "
            f"(the sandboxes {_signed(host)}, PostgreSQL {_signed(postgres)})"
        )

    runs = sorted([*earlier, soak], key=lambda run: run["began"])
    return (
        "Every soak kept, oldest first (docs/bench/soak.json and docs/bench/soaks/): its "
        "throughput, last five waves over the first five (CPU a task, same comparison): "
        + "; ".join(told(run) for run in runs)
        + "."
    )


def _signed(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1%}"


def render(bench: Run, soak: Run | None, earlier: Sequence[Run] = ()) -> str:
    parts = [
        BEGIN,
        f"Measured on {machine_line(bench)}.",
        table_paths(bench),
        table_ratios(bench),
        table_budget(bench),
        table_step(bench),
        table_e2e(bench),
        table_dashboard(bench),
    ]
    if soak is not None:
        parts += [table_soak(soak), soak_history(soak, earlier)]
    parts.append(END)
    return "\n\n".join(p for p in parts if p)


def runs_load(directory: Path = FIGURES_DIR) -> tuple[Run, Run | None]:
    bench = json.loads((directory / "bench.json").read_text())
    soak_path = directory / "soak.json"
    soak = json.loads(soak_path.read_text()) if soak_path.exists() else None
    return bench, soak


def soaks_load(directory: Path = FIGURES_DIR) -> list[Run]:
    """The earlier soaks kept beside the latest (``soaks/``)."""
    return [json.loads(path.read_text()) for path in sorted((directory / "soaks").glob("*.json"))]


def readme_block(text: str, begin: str = BEGIN, end: str = END) -> str:
    start, stop = text.index(begin), text.index(end) + len(end)
    return text[start:stop]


SIZING_BEGIN = "<!-- bench sizing: begin (python -m devtools.bench.figures --write README.md) -->"
SIZING_END = "<!-- bench sizing: end -->"


def sizing(run: Run) -> str:
    """What one PostgreSQL core carries, from the benchmark's CPU readings: a step of the
    production path, a renewal end to end, and a worker process's own pace."""
    pg_step = run["cpu_us_per_step"]["production"]["postgres"]["median"]
    cpu, rates = run["e2e_cpu_ms_per_task"], run["e2e_tasks_per_s"]
    pg_task = cpu["2_workers"]["postgres"]
    one, one_pg = rates["1_worker"], cpu["1_worker"]["postgres"]
    per_core = 1000.0 / (one * one_pg)
    wal = run["per_step"]["wal_bytes_per_step"]
    return "\n".join(
        [
            f"| sizing (`make bench`, commit `{str(run['code']['commit'])[:10]}`) | |",
            "|---|---:|",
            f"| PostgreSQL's CPU a step of the production path | {pg_step:,.0f} µs |",
            f"| steps a second one PostgreSQL core carries, at that | {1e6 / pg_step:,.0f} |",
            f"| PostgreSQL's CPU a renewal end to end (2 workers) | {pg_task:.1f} ms |",
            f"| renewals a second one PostgreSQL core carries, at that | {1000 / pg_task:,.0f} |",
            f"| one worker process alone | {one:.1f} renewals/s |",
            f"| worker processes one PostgreSQL core holds before it saturates | {per_core:.1f} |",
            f"| WAL a step (one task of 200 steps) | {wal:,.0f} B |",
        ]
    )


def blocks_written(text: str, block: str, sizing_block: str) -> str:
    """``text`` with each block it holds (the figures, the sizing) replaced by the one given."""
    for begin, end, new in ((BEGIN, END, block), (SIZING_BEGIN, SIZING_END, sizing_block)):
        if begin in text:
            text = text.replace(readme_block(text, begin, end), new)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=FIGURES_DIR)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", type=Path, metavar="PAGE", help="replace the block there")
    group.add_argument("--check", type=Path, metavar="PAGE", help="exit 1 if it differs")
    options = parser.parse_args(argv)
    bench, soak = runs_load(options.dir)
    block = render(bench, soak, soaks_load(options.dir))
    sizing_block = "\n\n".join([SIZING_BEGIN, sizing(bench), SIZING_END])
    if options.write is not None:
        text = options.write.read_text()
        options.write.write_text(blocks_written(text, block, sizing_block))
    elif options.check is not None:
        text = options.check.read_text()
        if blocks_written(text, block, sizing_block) != text:
            print(f"{options.check}: the bench figures differ from {options.dir}", file=sys.stderr)
            return 1
    else:
        print(block)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
