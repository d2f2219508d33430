"""The suite split into shards (tests/sharding.py): every test in exactly one shard, the shards
about equal in time, and a pytest a shard starts runs whole."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sharding import SHARD_VARIABLE, UNKNOWN_SECONDS, shard_parse, split

REPO = Path(__file__).resolve().parent.parent


def test_every_file_is_in_exactly_one_shard_and_the_shards_are_about_even() -> None:
    seconds = {f"t{i}.py": float(s) for i, s in enumerate([66, 60, 60, 22, 21, 17, 11, 10, 9, 3])}
    files = [*seconds, "new_a.py", "new_b.py"]  # two the record does not know
    for count in (1, 2, 3, 5):
        shards = split(reversed(files), seconds, count)
        assert len(shards) == count
        flat = [f for shard in shards for f in shard]
        assert sorted(flat) == sorted(files)  # each once, none lost
        loads = [sum(seconds.get(f, UNKNOWN_SECONDS) for f in shard) for shard in shards]
        # Longest first to the least loaded: no shard is more than one file over another.
        assert max(loads) - min(loads) <= max(seconds.values())
        assert split(files, seconds, count) == shards  # the same in every shard's process
    two = split(files, seconds, 2)
    loads = [sum(seconds.get(f, UNKNOWN_SECONDS) for f in shard) for shard in two]
    assert abs(loads[0] - loads[1]) <= 15


@pytest.mark.parametrize("text", ["", "2", "0/2", "3/2", "a/b", "1/0"])
def test_a_shard_not_i_of_n_is_refused_with_what_is_expected(text: str) -> None:
    with pytest.raises(pytest.UsageError, match="expected I/N"):
        shard_parse(text)


def _collected(shard: str | None) -> set[str]:
    env = {k: v for k, v in os.environ.items() if k != SHARD_VARIABLE}
    env.setdefault("DATABASE_URL", "postgres://collect@127.0.0.1:1/collect")
    if shard:
        env[SHARD_VARIABLE] = shard
    said = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:randomly",
            "tests/test_docs.py",
            "tests/test_sharding.py",
            "tests/test_stack_runinfo.py",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert said.returncode == 0, said.stdout + said.stderr
    return {line for line in said.stdout.splitlines() if "::" in line}


def test_the_shards_of_a_run_together_collect_what_the_whole_run_does() -> None:
    whole = _collected(None)
    one, two = _collected("1/2"), _collected("2/2")
    assert one and two
    assert one.isdisjoint(two)
    assert one | two == whole
