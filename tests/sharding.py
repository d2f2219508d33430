"""One shard of the suite: ``AGENTOPS_TEST_SHARD=I/N`` runs the test files the split gives shard
I of N, and deselects the rest (the summary counts them), so N runs side by side, each against
servers of its own (``python -m devtools.stack test --shards N``), run every test exactly once.

The split is by file (a module's fixtures stay in one process) and balanced by how long each
file took (``tests/durations.json``): the longest first, each to the shard with the least so
far. Every shard collects the same files and so makes the same split. A file the record does
not know counts ``UNKNOWN_SECONDS``; a stale record makes the shards uneven, never wrong.

``AGENTOPS_TEST_DURATIONS=PATH`` records this run's seconds by file into PATH (merged with
what is there, under a lock, so the shards of one run can share it): refresh the record with
``AGENTOPS_TEST_DURATIONS=tests/durations.json make test``."""

from __future__ import annotations

import fcntl
import json
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

SHARD_VARIABLE = "AGENTOPS_TEST_SHARD"
DURATIONS_VARIABLE = "AGENTOPS_TEST_DURATIONS"
RECORD = Path(__file__).with_name("durations.json")
UNKNOWN_SECONDS = 2.0
_collected = pytest.StashKey[int]()
"""How many tests this shard collected before the split deselected the others'."""


def shard_parse(text: str) -> tuple[int, int]:
    """``"I/N"`` → (I, N), 1 ≤ I ≤ N; a clear error otherwise."""
    index, _, count = text.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        i = n = 0
    if not 1 <= i <= n:
        raise pytest.UsageError(f"{SHARD_VARIABLE}={text!r}: expected I/N with 1 <= I <= N")
    return i, n


def split(files: Iterable[str], seconds: Mapping[str, float], count: int) -> list[list[str]]:
    """`files` into `count` shards of about equal seconds: the longest first, each to the
    shard with the least so far (ties: the lower shard; equal files: by name)."""
    shards: list[list[str]] = [[] for _ in range(count)]
    loads = [0.0] * count
    for name in sorted(set(files), key=lambda f: (-seconds.get(f, UNKNOWN_SECONDS), f)):
        least = min(range(count), key=lambda s: (loads[s], s))
        shards[least].append(name)
        loads[least] += seconds.get(name, UNKNOWN_SECONDS)
    return shards


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _recorded() -> dict[str, float]:
    try:
        data = json.loads(RECORD.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


_shard = pytest.StashKey[tuple[int, int] | None]()


def pytest_configure(config: pytest.Config) -> None:
    # Taken out of the environment: a pytest this run starts (a test of the suite's own
    # gates, a generated app's tests) runs whole, not as this shard.
    text = os.environ.pop(SHARD_VARIABLE, "")
    config.stash[_shard] = shard_parse(text) if text else None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shard = config.stash.get(_shard, None)
    if shard is None:
        return
    index, count = shard
    mine = set(split((_file(i) for i in items), _recorded(), count)[index - 1])
    kept = [i for i in items if _file(i) in mine]
    gone = [i for i in items if _file(i) not in mine]
    config.stash[_collected] = len(items)
    if gone:
        config.hook.pytest_deselected(items=gone)
        items[:] = kept


_seconds: dict[str, float] = defaultdict(float)
"""This run's seconds by file, every phase (setup, call, teardown) counted."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _seconds[report.nodeid.split("::", 1)[0]] += report.duration


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    # A shard that the split gave no file of a selection (one test asked for by name) ran
    # nothing, and that is not an error of the run: the other shard ran it.
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and config.stash.get(_collected, 0):
        session.exitstatus = pytest.ExitCode.OK
    out = os.environ.get(DURATIONS_VARIABLE, "")
    if not out or exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        return
    # The record itself is locked while it is read and written again, so that the shards of
    # one run, finishing together, each add theirs.
    with open(out, "a+") as record_file:
        fcntl.flock(record_file, fcntl.LOCK_EX)
        record_file.seek(0)
        try:
            record = json.loads(record_file.read() or "{}")
        except ValueError:
            record = {}
        for name, seconds in _seconds.items():
            record[name] = round(seconds, 2)
        record_file.seek(0)
        record_file.truncate()
        record_file.write(json.dumps(dict(sorted(record.items())), indent=1) + "\n")
