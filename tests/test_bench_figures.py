"""The README's benchmark figures are the runs' own (docs/bench/*.json), rendered, never typed:
a figure changed by hand, or a run replaced without rendering it again, fails here."""

from __future__ import annotations

from pathlib import Path

from devtools.bench.figures import FIGURES_DIR, readme_block, render, runs_load

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_readmes_bench_figures_are_the_runs_own() -> None:
    bench, soak = runs_load()
    assert bench["kind"] == "bench" and soak is not None and soak["kind"] == "soak"
    for run in (bench, soak):
        assert len(run["code"]["commit"]) == 40, run["code"]
        assert not run["code"]["uncommitted_changes"], (
            f"a run in {FIGURES_DIR} measured code that was not committed: run it again"
        )
    assert readme_block(README.read_text()) == render(bench, soak), (
        "the README's bench figures differ from docs/bench/: "
        "python -m devtools.bench.figures --write README.md"
    )


def test_a_target_is_reported_as_measured() -> None:
    bench, _ = runs_load()
    for name, target in bench["targets"].items():
        assert target["met"] == (target["measured"] >= target["target"]), name
