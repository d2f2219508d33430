"""``test --shards N``: N launchers side by side, each with throwaway servers of its own, each
running CMD as shard I of N (``AGENTOPS_TEST_SHARD=I/N``, which ``tests/sharding.py`` reads:
pytest runs the files the split gives that shard). Nothing is shared between the shards but
the machine: every test keeps the servers, queues and databases it would have alone, and a
test that restarts PostgreSQL restarts its own shard's.

Each shard's lines come out as they come, after ``I/N |``; at the end, one line a shard (its
exit code and time) and the exit code of the whole: the first shard's that is not 0, or 0."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO

from devtools.stack.base import Interrupted, log, print_lock

SHARD_VARIABLE = "AGENTOPS_TEST_SHARD"
SUMMARY = re.compile(r"\d+ (passed|failed|errors?|deselected)")
"""pytest's last line: "1210 passed, 3 deselected in 300.1s"."""


def _relay(prefix: str, stream: IO[bytes] | None, tail: list[str]) -> None:
    if stream is None:
        return
    for raw in stream:
        line = raw.decode(errors="replace").rstrip("\n")
        tail[:] = [*tail[-4:], line]
        with print_lock:
            print(f"{prefix} | {line}", file=sys.stderr, flush=True)


def cmd_shards(cmd: Sequence[str], count: int) -> int:
    """CMD as `count` shards, each under `python -m devtools.stack test`."""
    began = time.monotonic()
    shards: list[tuple[str, subprocess.Popen[bytes], threading.Thread, list[str]]] = []
    took: dict[str, float] = {}
    try:
        for index in range(1, count + 1):
            name = f"{index}/{count}"
            # In our process group: a terminal's Ctrl-C reaches each shard and its command.
            proc = subprocess.Popen(  # noqa: S603 - the launcher, with the command it was given
                [sys.executable, "-m", "devtools.stack", "test", "--", *cmd],
                env={**os.environ, SHARD_VARIABLE: name},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            tail: list[str] = []
            out = proc.stdout  # a pipe, as asked
            reader = threading.Thread(target=_relay, args=(name, out, tail), daemon=True)
            reader.start()
            shards.append((name, proc, reader, tail))
        codes = []
        for name, proc, reader, _ in shards:
            codes.append(proc.wait())
            took[name] = time.monotonic() - began
            reader.join(timeout=10)
    except Interrupted as stop:
        log(f"{stop} received; stopping the shards")
        for _, proc, _, _ in shards:
            if stop.signum != signal.SIGINT:  # a terminal's Ctrl-C reached them already
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(stop.signum)
        for _, proc, _, _ in shards:
            _wait(proc)
        return 128 + stop.signum
    for (name, _, _, tail), code in zip(shards, codes, strict=True):
        last = next((line for line in reversed(tail) if SUMMARY.search(line)), "")
        log(f"shard {name}: exit {code} after {took[name]:.0f}s  {last.strip('= ')}")
    log(f"{count} shards in {time.monotonic() - began:.0f}s")
    return next((code for code in codes if code != 0), 0)


def _wait(proc: subprocess.Popen[bytes]) -> int:
    """Its exit code, waiting through a stop signal (the shard stops itself)."""
    while True:
        try:
            return proc.wait()
        except Interrupted:
            continue
