"""The chaos figures of docs/proof.md (issues 16, 18): rendered from the runs' own files, every run
of the same code, each naming the commit it ran; the renderer refuses other code's."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from devtools.chaos import figures
from devtools.chaos.code import PRODUCT, code_differs
from devtools.chaos.figures import FIGURES_DIR, readme_block, render, runs_load, runs_stale
from devtools.process import REPO

HARNESSES = ("safe", "naive", "mcp")
SEEDS = (1, 2, 3, 4, 5)


def test_the_proof_pages_chaos_figures_are_the_runs_own() -> None:
    runs = runs_load()
    found = {(r["harness"], r["seed"]) for r in runs}
    wanted = {(h, n) for h in HARNESSES for n in SEEDS}
    assert found == wanted, (
        f"docs/chaos/ holds {sorted(found)}; docs/proof.md's figures are seeds 1-5 of each "
        f'harness, missing {sorted(wanted - found)}: run them (docs/proof.md, "Figures")'
    )
    assert readme_block((REPO / "docs" / "proof.md").read_text()) == render(runs), (
        "docs/proof.md's chaos figures are not docs/chaos/*.json's: run "
        "`.venv/bin/python -m devtools.chaos.figures --write docs/proof.md`"
    )
    for run in runs:
        assert run["ok"] is (run["harness"] != "naive"), (run["harness"], run["seed"])
        # Each ran a commit's product, as committed, and recorded its trees...
        code = run.get("code") or {}
        assert re.fullmatch(r"[0-9a-f]{40}", code.get("commit") or ""), (run["seed"], code)
        assert code["clean"] is True and set(code["product"]) == set(PRODUCT), code
    # ...and every figure on the page is of the same product.
    products = {json.dumps(r["code"]["product"], sort_keys=True) for r in runs}
    assert len(products) == 1, "the runs ran different code: run them again on one commit"


def _run(harness: str, seed: int, code: dict[str, Any] | None) -> dict[str, Any]:
    """A run's figures, shaped as its JSON is: a safe run's file, made over into ``harness``."""
    run: dict[str, Any] = json.loads((FIGURES_DIR / "figures-seed-1-safe.json").read_text())
    run.update(harness=harness, seed=seed, ok=harness != "naive")
    if harness == "mcp":
        run.update(
            intents=41,
            mcp_calls=97,
            untrue_answers=0,
            mcp_answers={"done": 50, "not_done": 3, "unknown": 9, "refused": 4, "dropped": 2},
            model_slips={"rephrase": 5, "refused:invalid_arguments": 2, "answered:repeated": 3},
        )
    run.pop("code", None)
    if code is not None:
        run["code"] = code
    return run


TREES = {path: f"{n:040x}" for n, path in enumerate(PRODUCT, start=1)}
CODE = {"commit": "ab" * 20, "clean": True, "product": TREES}


def test_the_figures_show_each_harness_and_the_commit_each_run_ran() -> None:
    runs = [_run(h, 1, CODE) for h in HARNESSES] + [_run("safe", 2, None)]
    runs.sort(key=lambda r: (HARNESSES.index(r["harness"]), r["seed"]))
    block = render(runs)
    table = block.split("\n\n")[1].splitlines()
    assert table[0] == "| | safe | safe | naive | mcp |"
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table[2:]}
    assert rows["commit"] == f"| commit | {'ab' * 5} | — | {'ab' * 5} | {'ab' * 5} |"
    # The mcp harness's own rows are its alone; the answers it was given are counted.
    assert rows["**untrue_answers**"].endswith("| — | — | — | 0 |")
    assert rows["MCP calls"].endswith("| — | — | — | 97 |")
    assert rows["… answered done / not done / unknown / refused"].endswith("| 50 / 3 / 9 / 4 |")
    assert rows["… no answer: dropped / server error"].endswith("| 2 / 0 |")
    assert rows["… nothing sent for it (refused, or answered as before)"].endswith("| 5 |")
    assert "mcp: hits | p50 | max | never" in block
    changed = _run("mcp", 3, {**CODE, "clean": False})
    assert "(changed)" in render([changed])


def test_the_customers_told_show_once_a_run_has_counted_them() -> None:
    """Issue 38: runs from before the customers told were counted leave the page as it was;
    once one has, each harness's figure shows, "—" for a run that did not count them."""
    # As a run made before then recorded it: without the customers' figures.
    earlier = [
        {k: v for k, v in _run(h, 1, CODE).items() if not k.startswith("customers_")}
        for h in HARNESSES
    ]
    assert "customers_" not in render(earlier)
    counted = [
        {**r, "customers_not_told": n, "customers_told_twice": 0, "customers_told_wrongly": 0}
        for r, n in zip(earlier, (0, 7, 0), strict=True)
    ]
    uncounted = {k: v for k, v in _run("safe", 2, CODE).items() if not k.startswith("customers_")}
    table = render([*counted, uncounted]).split("\n\n")[1].splitlines()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table[2:]}
    assert rows["**customers_not_told**"] == "| **customers_not_told** | 0 | 7 | 0 | — |"
    assert rows["**customers_told_twice**"].endswith("| 0 | 0 | 0 | — |")
    assert rows["**customers_told_wrongly**"].endswith("| 0 | 0 | 0 | — |")


def test_figures_of_other_code_than_the_current_commit_s_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert code_differs(CODE, TREES) is None
    other = {**TREES, "agentops": "f" * 40}
    assert code_differs(CODE, other) == (
        f"ran {'ab' * 5}, whose agentops differ from the current commit's"
    )
    assert "not as committed" in (code_differs({**CODE, "clean": False}, TREES) or "")
    assert "records no commit" in (code_differs(None, TREES) or "")
    assert "no tree of the product" in (code_differs({**CODE, "product": None}, TREES) or "")

    for harness in HARNESSES:
        (tmp_path / f"figures-seed-1-{harness}.json").write_text(json.dumps(_run(harness, 1, CODE)))
    readme = tmp_path / "proof.md"
    readme.write_text(f"before\n{figures.BEGIN}\nold\n{figures.END}\nafter\n")
    args = ["--dir", str(tmp_path)]
    # The current commit's product is another: nothing is written, or passed.
    monkeypatch.setattr(figures, "product_trees", lambda: other)
    assert runs_stale(runs_load(tmp_path), other) == [
        f"seed 1 {h}: ran {'ab' * 5}, whose agentops differ from the current commit's"
        for h in HARNESSES
    ]
    assert figures.main([*args, "--write", str(readme)]) == 1
    assert "\nold\n" in readme.read_text()
    assert figures.main([*args, "--check", str(readme)]) == 1
    assert figures.main([*args, "--write", str(readme), "--allow-stale"]) == 0
    # The same product: written, and then the page is the files'.
    readme.write_text(f"before\n{figures.BEGIN}\nold\n{figures.END}\nafter\n")
    monkeypatch.setattr(figures, "product_trees", lambda: TREES)
    assert figures.main([*args, "--write", str(readme)]) == 0
    assert figures.main([*args, "--check", str(readme)]) == 0
    assert readme_block(readme.read_text()) == render(runs_load(tmp_path))
    assert readme.read_text().startswith("before\n") and readme.read_text().endswith("after\n")


CLUSTER_SEEDS = (1, 2, 3)


def test_the_cluster_runs_pass_for_safe_and_mcp_and_fail_for_naive_with_every_fault() -> None:
    """Issue 36: `make chaos-cluster` on 3 seeds, each harness, each run with a failover, a
    switchover, the primary cut off, Redis restarted empty and a rolling deploy; docs/proof.md's
    cluster figures and the README's sizing are rendered from their files."""
    from devtools.chaos.figures import (
        CLUSTER_BEGIN,
        CLUSTER_END,
        SIZING_BEGIN,
        SIZING_END,
        cluster_runs_load,
        render_cluster,
        sizing,
    )
    from devtools.chaos.plan import CLUSTER_FAULTS

    runs = cluster_runs_load()
    found = {(r["harness"], r["seed"]) for r in runs}
    assert found == {(h, n) for h in HARNESSES for n in CLUSTER_SEEDS}, sorted(found)
    for run in runs:
        assert run["ok"] is (run["harness"] != "naive"), (run["harness"], run["seed"])
        fired = [f["kind"] for f in run["cluster"]["faults"] if "error" not in f]
        assert fired == [k for k in CLUSTER_FAULTS if k != "redis_restart"], fired
        assert run["faults_injected"].get("redis_restart", 0) >= 1
        assert not run["cluster"]["short"]
        if run["harness"] != "naive":
            assert run["committed_lost"] == 0
            assert all(f.get("recovery_s") is not None for f in run["cluster"]["faults"])
        code = run["code"]
        assert code["clean"] is True and set(code["product"]) == set(PRODUCT), code
    page = (REPO / "docs" / "proof.md").read_text()
    assert readme_block(page, CLUSTER_BEGIN, CLUSTER_END) == render_cluster(runs)
    readme = (REPO / "README.md").read_text()
    sized = readme_block(readme, SIZING_BEGIN, SIZING_END)
    assert sized == "\n\n".join([SIZING_BEGIN, sizing(runs), SIZING_END])
