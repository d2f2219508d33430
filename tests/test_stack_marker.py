"""A test marked ``@pytest.mark.stack`` fails, and never skips, where the launcher's servers
are not there (tests/conftest.py): so a change to how CI starts the tests cannot silently
turn them into skips. Shown by running one such test in a pytest of its own, without the
launcher's control socket, with one that does not answer, and deselected."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from devtools.stack.control import CONTROL_VARIABLE

ROOT = Path(__file__).resolve().parents[1]
MARKED = "tests/test_redis_hardening.py::test_redis_refuses_every_command_agentops_never_sends"


def _pytest(*args: str, control: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != CONTROL_VARIABLE}
    env.setdefault("DATABASE_URL", "postgres://unused@127.0.0.1:1/unused")  # never connected
    if control is not None:
        env[CONTROL_VARIABLE] = control
    return subprocess.run(
        [sys.executable, "-m", "pytest", MARKED, "-p", "no:cacheprovider", "-q", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _summary(run: subprocess.CompletedProcess[str]) -> str:
    return run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr


def _failed(run: subprocess.CompletedProcess[str]) -> bool:
    """Failed in its setup (pytest reports that as an error), neither skipped nor passed."""
    summary = _summary(run)
    return (
        run.returncode == 1
        and ("1 error" in summary or "1 failed" in summary)
        and "skipped" not in summary
        and "passed" not in summary
    )


def test_a_stack_test_fails_without_the_launcher() -> None:
    run = _pytest(control=None)
    assert _failed(run), run.stdout + run.stderr
    assert f"({CONTROL_VARIABLE} is not set)" in run.stdout
    assert "-m 'not stack'" in run.stdout  # it says how to leave it out on purpose


def test_a_stack_test_fails_when_the_launcher_does_not_answer(tmp_path: Path) -> None:
    run = _pytest(control=str(tmp_path / "no-such-socket"))
    assert _failed(run), run.stdout + run.stderr
    assert "control socket did not answer" in run.stdout


def test_a_stack_test_is_left_out_only_in_so_many_words() -> None:
    run = _pytest("-m", "not stack", control=None)
    assert run.returncode == 5, run.stdout + run.stderr  # no test ran, and it says so
    assert "1 deselected" in _summary(run), _summary(run)
