"""What the wheel ships: every file of the product's packages, the Python modules and the rest
(the journal's SQL functions and their checksums, the pages' templates, startkind's templates),
and nothing of the development tools. Built with setuptools' own build step, as the wheel is,
into a directory: no network, no wheel written."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("agentops", "journal", "sandbox", "commerce")


def test_the_wheel_ships_every_file_of_the_products_packages_and_no_development_tool(
    tmp_path: Path,
) -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "--", *PACKAGES],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert any(name.endswith(".sql") for name in tracked)
    # A copy of what git tracks: an egg-info left by an install would add what it lists.
    source, out = tmp_path / "source", tmp_path / "lib"
    for name in [*tracked, "pyproject.toml"]:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / name, source / name)
    built = subprocess.run(
        [
            sys.executable,
            "-c",
            "from setuptools import setup; setup()",
            "-q",
            "build_py",
            "--build-lib",
            str(out),
        ],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr
    shipped = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert sorted(set(tracked) - shipped) == []
    assert not any(name.startswith(("devtools/", "tests/", "scripts/")) for name in shipped)
