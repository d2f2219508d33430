"""The chaos run on a Patroni cluster, short (issue 36; docs/proof.md, "On a Patroni cluster"):
seed 1's tasks and faults, with the primary killed once and cut from the network once, judged
as every chaos run is (each figure of MUST_BE_ZERO against the providers' ledgers) and by
``committed_lost``: no step the primary showed committed before a fault is missing or settled
otherwise after it. `make chaos-cluster` runs the whole of it."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from devtools.process import REPO

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]


def test_the_short_cluster_chaos_run_passes_with_a_failover_and_a_partition(
    tmp_path: Path,
) -> None:
    import django_rq

    django_rq.get_connection("default").flushdb()  # the run's queue is its own
    out = tmp_path / "figures.json"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentops.settings",
        "DJANGO_DEBUG": "0",
        "DJANGO_HTTPS": "0",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "AGENTOPS_DEVTOOLS": "1",
        "REDIS_URL": str(settings.REDIS_URL),
    }
    ran = subprocess.run(  # noqa: S603 - our own module
        [sys.executable, "-m", "devtools.chaos.cluster", "--json", "--short", "--seed", "1"]
        + ["--tasks", "30", "--workdir", str(tmp_path / "run"), "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert out.exists(), ran.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert ran.returncode == 0 and figures["ok"], (figures["failed"], ran.stderr[-3000:])
    assert figures["committed_lost"] == 0
    faults = figures["cluster"]["faults"]
    assert [f["kind"] for f in faults] == ["postgres_failover", "postgres_isolate"], faults
    assert all(f.get("recovery_s") is not None for f in faults), faults
    # Read from the journal: no step commits until a primary is back, which takes Patroni
    # seconds (its ttl, 10 s), and one commits before the run ends.
    assert all(2.0 < f["recovery_s"] < 60.0 for f in faults), faults
    capacity = figures["capacity"]
    assert capacity["wal_bytes_per_step"] > 0 and capacity["journal_bytes_per_task"] > 0
    assert capacity["commit_sync_ms"] > 0 and capacity["commit_local_ms"] > 0
    print(json.dumps({"faults": faults, "capacity": capacity}))
