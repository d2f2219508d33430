"""The README's chaos figures (issues 16, 18): rendered from the runs' own files."""

from __future__ import annotations

import pytest

from devtools.chaos.figures import readme_block, render, runs_load
from devtools.process import REPO

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")


def test_the_readme_s_chaos_figures_are_the_runs_own() -> None:
    runs = runs_load()
    assert {(r["harness"], r["seed"]) for r in runs} == {
        (h, n) for h in ("safe", "naive") for n in (1, 2, 3, 4, 5)
    }
    assert readme_block((REPO / "README.md").read_text()) == render(runs), (
        "README.md's chaos figures are not docs/chaos/*.json's: run "
        "`.venv/bin/python -m devtools.chaos.figures --write README.md`"
    )
    for run in runs:
        assert run["ok"] is (run["harness"] != "naive"), (run["harness"], run["seed"])
        # A run that records its code (since the mcp harness: the other harnesses' figures
        # predate the record) ran a commit's code, with nothing changed or added beside it.
        if run["harness"] == "mcp" or "code" in run:
            assert run["code"]["clean"] is True and len(run["code"]["commit"]) == 40, run["code"]
