"""The chaos run's figures (docs/proof.md), rendered from the runs' own output, never typed.

Each run of ``make chaos CHAOS_ARGS="--seed N --harness H --out docs/chaos/figures-seed-N-H.json"``
writes its figures (the JSON object ``--json`` prints) to ``docs/chaos/``. This module turns
those files into the tables of docs/proof.md ("Proof: the chaos run" → "Figures"):

    python -m devtools.chaos.figures                        # print the tables
    python -m devtools.chaos.figures --write docs/proof.md  # put them between the markers
    python -m devtools.chaos.figures --check docs/proof.md  # exit 1 if the page differs

Each run's column names the commit it ran. Figures of other code than the current commit's
are refused: ``--write`` and ``--check`` exit 1 (and write nothing) when a run's product
(devtools.chaos.code.PRODUCT) differs from the current commit's, was not as committed when
it ran, or was not recorded; ``--allow-stale`` writes them anyway, and printing only warns.

A test (tests/agentops/test_chaos_figures.py) checks that docs/proof.md holds exactly what
the files say. JSON in, Markdown out, and git asked for the current commit's trees; no Django.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from devtools.chaos.code import code_differs, product_trees

FIGURES_DIR = Path(__file__).resolve().parents[2] / "docs" / "chaos"
BEGIN = "<!-- chaos figures: begin (python -m devtools.chaos.figures --write docs/proof.md) -->"
END = "<!-- chaos figures: end -->"
HARNESSES = ("safe", "naive", "mcp")

Run = Mapping[str, Any]


def runs_load(directory: Path = FIGURES_DIR) -> list[Run]:
    """Every run's figures in ``directory``, safe, naive, then mcp, by seed."""
    runs = [json.loads(path.read_text()) for path in sorted(directory.glob("figures-*.json"))]
    return sorted(runs, key=lambda r: (HARNESSES.index(r["harness"]), r["seed"]))


def _bold(name: str) -> str:
    return f"**{name}**"


def _unwound(run: Run) -> Any:
    """Trips compensated because a slip was refused as a saga cannot take back (safe only:
    the naive loop has no such refusal, the mcp harness no trips)."""
    return run["model_slips"].get("sagas_unwound", 0) if run["harness"] == "safe" else "—"


def _nothing_sent(slips: Mapping[str, int]) -> int:
    """Slipped calls that sent nothing: refused, or (mcp) answered with the intent's own
    effect, found by its key."""
    return sum(v for k, v in slips.items() if k.startswith("refused:") or k == "answered:repeated")


def _or_dash(value: Any) -> Any:
    return "—" if value is None else value


def _mcp(value: Callable[[Run], Any]) -> Callable[[Run], Any]:
    """A figure only the mcp harness has ("—" for the others)."""
    return lambda r: value(r) if r["harness"] == "mcp" else "—"


def _commit(run: Run) -> str:
    """The commit a run ran (its first ten digits), "(changed)" if the product's files were
    not as committed; "—" for a run that predates the record."""
    code = run.get("code") or {}
    if not code.get("commit"):
        return "—"
    return str(code["commit"])[:10] + ("" if code.get("clean") is True else " (changed)")


def _answers(run: Run) -> str:
    a = run["mcp_answers"]
    return " / ".join(str(a.get(k, 0)) for k in ("done", "not_done", "unknown", "refused"))


def _no_answer(run: Run) -> str:
    a = run["mcp_answers"]
    return f"{a.get('dropped', 0)} / {a.get('error', 0)}"


Row = tuple[str, Callable[[Run], Any]]
_SLIPS = ("rephrase", "neighbour", "forget", "twice", "key_reuse", "confirm")

ROWS: Sequence[Row] = (
    ("seed", lambda r: r["seed"]),
    ("tasks (asked twice on purpose)", lambda r: f"{r['tasks']} ({r['world']['asked_twice']})"),
    ("… intents asked for over MCP", _mcp(lambda r: r["intents"])),
    ("intended effects", lambda r: r["intended_effects"]),
    ("provider effects", lambda r: r["provider_effects"]),
    (_bold("duplicates"), lambda r: r["duplicates"]),
    (_bold("business_duplicates"), lambda r: r["business_duplicates"]),
    ("… from faults", lambda r: r["business_duplicates_by_cause"]["from_faults"]),
    ("… asked twice", lambda r: r["business_duplicates_by_cause"]["asked_twice"]),
    ("… wrong object", lambda r: r["business_duplicates_by_cause"]["wrong_object"]),
    (_bold("lost"), lambda r: r["lost"]),
    (_bold("unknown_open"), lambda r: r["unknown_open"]),
    (_bold("needs_human"), lambda r: r["needs_human"]),
    (_bold("dropped_intents"), lambda r: r["dropped_intents"]),
    (_bold("untrue_summaries"), lambda r: r["untrue_summaries"]),
    (_bold("compensation_mismatch"), lambda r: r["compensation_mismatch"]),
    (_bold("journal_mismatch"), lambda r: _or_dash(r["journal_mismatch"])),
    (_bold("untrue_answers"), lambda r: _or_dash(r.get("untrue_answers"))),
    (_bold("customers_not_told"), lambda r: _or_dash(r.get("customers_not_told"))),
    (_bold("customers_told_twice"), lambda r: _or_dash(r.get("customers_told_twice"))),
    (_bold("customers_told_wrongly"), lambda r: _or_dash(r.get("customers_told_wrongly"))),
    ("MCP calls", _mcp(lambda r: r["mcp_calls"])),
    ("… answered done / not done / unknown / refused", _mcp(_answers)),
    ("… no answer: dropped / server error", _mcp(_no_answer)),
    ("model slips", lambda r: sum(r["model_slips"].get(k, 0) for k in _SLIPS)),
    (
        "… nothing sent for it (refused, or answered as before)",
        lambda r: _nothing_sent(r["model_slips"]),
    ),
    ("… trips unwound after one", _unwound),
    (
        "approvals (approved / rejected)",
        lambda r: (
            "—"
            if r["harness"] == "mcp"
            else f"{r['approvals'].get('approved', 0)} / {r['approvals'].get('rejected', 0)}"
        ),
    ),
    ("outcomes: finished", lambda r: r["outcomes"].get("finished", 0)),
    ("outcomes: compensated", lambda r: r["outcomes"].get("compensated", 0)),
    ("faults injected", lambda r: sum(r["faults_injected"].values())),
    ("Stripe library retries", lambda r: r["world"]["stripe_max_network_retries"]),
    ("wall (s)", lambda r: f"{r['wall_s']:.1f}"),
    ("exit status", lambda r: 0 if r["ok"] else 1),
    ("commit", _commit),
)


LATER = {
    _bold(name): name
    for name in ("customers_not_told", "customers_told_twice", "customers_told_wrongly")
}
"""Rows of figures a run records only since they were first counted (issue 38): shown once
some run on the page has them, so a page of earlier runs reads as it did."""


def table_main(runs: Sequence[Run]) -> str:
    head = "| | " + " | ".join(r["harness"] for r in runs) + " |"
    rule = "|---|" + "---|" * len(runs)
    lines = [head, rule]
    for name, value in ROWS:
        if name in LATER and not any(LATER[name] in r for r in runs):
            continue
        lines.append(f"| {name} | " + " | ".join(str(value(r)) for r in runs) + " |")
    return "\n".join(lines)


RECOVERY = (
    ("latency_before_effect", "latency_before_effect"),
    ("drop_after_effect", "drop_after_effect"),
    ("error_500_before", "error_500_before"),
    ("error_500_after", "error_500_after"),
    ("conflict", "conflict (409)"),
    ("rate_limit", "rate_limit (429)"),
    ("reset_before_read", "reset_before_read"),
    ("provider_down", "provider_down"),
    ("worker_sigkill", "worker_sigkill"),
    ("worker_killed_", "worker_killed_before/during/after_call"),
    ("worker_sigstop", "worker_sigstop (past the lease)"),
    ("redis_restart", "redis_restart"),
    ("postgres_restart", "postgres_restart"),
    ("mcp_server_kill", "mcp_server_kill (mid-call)"),
)


def _pooled(runs: Sequence[Run], prefix: str) -> list[str]:
    """Hits, p50 (the median of the runs' medians), max and never, over ``runs``."""
    rows = [
        v
        for r in runs
        for kind, v in r["recovery_s"].items()
        if kind == prefix or (prefix.endswith("_") and kind.startswith(prefix))
    ]
    if not rows:
        return ["—"] * 4
    medians = [v["p50"] for v in rows if v["p50"] is not None]
    maxima = [v["max"] for v in rows if v["max"] is not None]
    return [
        str(sum(v["n"] for v in rows)),
        f"{statistics.median(medians):.1f}" if medians else "—",
        f"{max(maxima):.1f}" if maxima else "—",
        str(sum(v["never"] for v in rows)),
    ]


def table_recovery(runs: Sequence[Run]) -> str:
    present = [h for h in HARNESSES if any(r["harness"] == h for r in runs)]
    head = " | ".join(f"{h}: hits | p50 | max | never" for h in present)
    lines = [f"| fault | {head} |", "|---|" + "---:|" * (4 * len(present))]
    for kind, name in RECOVERY:
        cells = []
        for harness in present:
            cells += _pooled([r for r in runs if r["harness"] == harness], kind)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render(runs: Sequence[Run]) -> str:
    """The page's block: both tables, between the markers."""
    seeds = sorted({r["seed"] for r in runs})
    return "\n\n".join(
        [
            BEGIN,
            table_main(runs),
            f"Recovery, seeds {', '.join(map(str, seeds))} pooled (p50: the median of the "
            "runs' medians; seconds):",
            table_recovery(runs),
            END,
        ]
    )


def readme_block(text: str, begin: str = BEGIN, end: str = END) -> str:
    start, stop = text.index(begin), text.index(end) + len(end)
    return text[start:stop]


# --- the cluster run (``make chaos-cluster``: devtools.chaos.cluster) --------------------------

CLUSTER_BEGIN = (
    "<!-- cluster figures: begin (python -m devtools.chaos.figures --write docs/proof.md) -->"
)
CLUSTER_END = "<!-- cluster figures: end -->"
SIZING_BEGIN = "<!-- sizing: begin (python -m devtools.chaos.figures --write README.md) -->"
SIZING_END = "<!-- sizing: end -->"
CLUSTER_FAULT_NAMES = {
    "postgres_failover": "primary killed (failover)",
    "postgres_switchover": "switchover",
    "postgres_isolate": "primary cut off (partition)",
    "rolling_deploy": "rolling deploy of the workers",
}


def cluster_runs_load(directory: Path = FIGURES_DIR) -> list[Run]:
    """The cluster runs' figures (``cluster-seed-N-HARNESS.json``), by seed then harness."""
    runs = [json.loads(p.read_text()) for p in sorted(directory.glob("cluster-*.json"))]
    order = {h: i for i, h in enumerate(HARNESSES)}
    return sorted(runs, key=lambda r: (r["seed"], order.get(r["harness"], 9)))


def _recovery(run: Run, kind: str) -> str:
    found = [f for f in run.get("cluster", {}).get("faults", []) if f.get("kind") == kind]
    if not found:
        return "—"
    return ", ".join(
        f"{f['recovery_s']:.1f}" if f.get("recovery_s") is not None else "never" for f in found
    )


def table_cluster(runs: Sequence[Run]) -> str:
    head = "| | " + " | ".join(f"seed {r['seed']} {r['harness']}" for r in runs) + " |"
    lines = [head, "|---|" + "---:|" * len(runs)]
    rows: list[tuple[str, Callable[[Run], Any]]] = [
        ("verdict", lambda r: "**pass**" if r["ok"] else "fail"),
        ("tasks", lambda r: r["tasks"]),
        *[
            (_bold(name), lambda r, n=name: _or_dash(r.get(n)))
            for name in ("duplicates", "business_duplicates", "lost", "unknown_open")
        ],
        (_bold("needs_human"), lambda r: _or_dash(r.get("needs_human"))),
        (_bold("committed_lost"), lambda r: _or_dash(r.get("committed_lost"))),
        *[
            (f"{label}: s to the next commit", lambda r, k=kind: _recovery(r, k))
            for kind, label in CLUSTER_FAULT_NAMES.items()
        ],
        ("Redis restarted empty", lambda r: r["faults_injected"].get("redis_restart", 0)),
        ("worker processes started again", lambda r: r.get("worker_restarts", "—")),
        ("wall, s", lambda r: r.get("wall_s", "—")),
        ("commit", _commit),
    ]
    for name, value in rows:
        lines.append(f"| {name} | " + " | ".join(str(value(r)) for r in runs) + " |")
    return "\n".join(lines)


def sizing(runs: Sequence[Run]) -> str:
    """What a step and a task cost the primary, from the runs' capacity measurements (the
    median over the safe and mcp runs that measured it: the naive loop writes no journal)."""
    measured = [r["capacity"] for r in runs if r.get("capacity") and r["harness"] != "naive"]
    if not measured:
        return "No cluster run has measured its capacity yet."

    def med(name: str) -> float:
        return float(statistics.median(m[name] for m in measured))

    wal, size = med("wal_bytes_per_step"), med("journal_bytes_per_task")
    sync, local = med("commit_sync_ms"), med("commit_local_ms")
    per_day = size * 10 * 86400 / 1e9
    return "\n".join(
        [
            "| sizing (the safe and mcp cluster runs' medians) | |",
            "|---|---:|",
            f"| WAL a step (the primary's over the whole run: its faults' too) | {wal:,.0f} B |",
            f"| what the journal's tables and indexes grew by a task | {size:,.0f} B |",
            f"| the journal's growth a day at 10 tasks/s, before retention | {per_day:,.1f} GB |",
            f"| a one-row commit, synchronous standby (median of 200) | {sync:.2f} ms |",
            f"| the same, committed locally only (median of 200, interleaved) | {local:.2f} ms |",
            f"| what the synchronous standby adds to a commit | {sync - local:.2f} ms |",
        ]
    )


def render_cluster(runs: Sequence[Run]) -> str:
    if not runs:
        return "\n\n".join([CLUSTER_BEGIN, "No cluster run recorded yet.", CLUSTER_END])
    return "\n\n".join([CLUSTER_BEGIN, table_cluster(runs), sizing(runs), CLUSTER_END])


def runs_stale(runs: Sequence[Run], current: Mapping[str, str] | None) -> list[str]:
    """A sentence for each run whose figures are not of the current product (``current``:
    the current commit's trees, devtools.chaos.code.product_trees); empty when all are."""
    stale = []
    for run in runs:
        why = code_differs(run.get("code"), current)
        if why is not None:
            stale.append(f"seed {run['seed']} {run['harness']}: {why}")
    return stale


def blocks_written(text: str, chaos: str, cluster: str, sizing_block: str) -> str:
    """``text`` with each block it holds (the chaos figures, the cluster's, the sizing)
    replaced by the one given."""
    for begin, end, block in (
        (BEGIN, END, chaos),
        (CLUSTER_BEGIN, CLUSTER_END, cluster),
        (SIZING_BEGIN, SIZING_END, sizing_block),
    ):
        if begin in text:
            text = text.replace(readme_block(text, begin, end), block)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=FIGURES_DIR)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", type=Path, metavar="PAGE", help="replace the block there")
    group.add_argument("--check", type=Path, metavar="PAGE", help="exit 1 if it differs")
    parser.add_argument(
        "--allow-stale",
        action="store_true",
        help="write (or pass) figures of other code than the current commit's",
    )
    options = parser.parse_args(argv)
    runs = runs_load(options.dir)
    block = render(runs)
    cluster = cluster_runs_load(options.dir)
    cluster_block = render_cluster(cluster)
    sizing_block = "\n\n".join([SIZING_BEGIN, sizing(cluster), SIZING_END])
    stale = runs_stale([*runs, *cluster], product_trees())
    for sentence in stale:
        print(f"not the current code's figures: {sentence}", file=sys.stderr)
    refuse = bool(stale) and not options.allow_stale
    if refuse and (options.write is not None or options.check is not None):
        print(
            'refused: run them again on the current commit (docs/proof.md, "Figures"), or pass '
            "--allow-stale",
            file=sys.stderr,
        )
        return 1
    if options.write is not None:
        text = options.write.read_text()
        options.write.write_text(blocks_written(text, block, cluster_block, sizing_block))
    elif options.check is not None:
        text = options.check.read_text()
        if blocks_written(text, block, cluster_block, sizing_block) != text:
            print(f"{options.check}: the chaos figures differ from {options.dir}", file=sys.stderr)
            return 1
    else:
        print(block)
        print(cluster_block)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
