"""The primary dies between a worker's commit of a step and its call to the provider (issue 36).

The worker has committed the charge's record (its key, its first attempt started) and is
about to send it (devtools/cluster/pause.py holds it exactly there). The primary is killed;
Patroni promotes the synchronous standby. Then the worker sends the charge, and its next
write finds the primary gone. Synchronous replication kept the step: it is on the new primary,
recorded and pending, under the same key; the next run finds the charge at the provider by
that key and settles it. The provider was called once.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path

import pytest

from agentops.workers import WORKER_ARGS
from devtools.cluster import Cluster
from devtools.cluster.pause import armed
from devtools.process import Popen, end, spawn, wait_until
from devtools.stack.postgres import WEB_ROLE, WORKER_ROLE
from tests.agentops.test_business_effects import charges_of
from tests.cluster.test_failover import (
    START_SCRIPT,
    Observer,
    _env,
    _manage,
    cluster,  # noqa: F401 - the fixture
    migrated,
)
from tests.sandbox.fixtures import SandboxHandle

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]


def test_a_step_committed_before_its_call_survives_the_primarys_death_and_is_called_once(
    cluster: Cluster,  # noqa: F811 - the fixture
    payments_sandbox: SandboxHandle,
    mail_sandbox: SandboxHandle,
    bookings_sandbox: SandboxHandle,
    clean_faults: None,
    tmp_path: Path,
) -> None:
    tools = migrated(cluster, payments_sandbox, mail_sandbox, bookings_sandbox, tmp_path)
    runner = {"RECONCILE_SCHEDULE": "0.2,0.3,0.5,0.5,1,1,2,2,2", "SWEEP_GRACE_SECONDS": "1"}
    procs: list[Popen] = []
    try:
        procs.append(
            spawn(
                [sys.executable, "manage.py", *WORKER_ARGS],
                env=_env(
                    cluster, WORKER_ROLE, **tools, **runner, **armed("charge_customer", tmp_path)
                ),
                output=tmp_path / "worker.log",
            )
        )
        procs.append(
            spawn(
                [sys.executable, "manage.py", "sweep", "--interval", "0.3"],
                env=_env(cluster, WORKER_ROLE, **tools, **runner),
                output=tmp_path / "sweeper.log",
            )
        )
        invoice = f"INV-{uuid.uuid4().hex[:10]}"
        out = _manage(
            _env(cluster, WEB_ROLE, **tools),
            "shell",
            "-c",
            START_SCRIPT.format(invoices=json.dumps([invoice])),
            timeout=120,
            log=tmp_path / "start.log",
        )
        (task_id,) = json.loads(out.split("TASKS ", 1)[1])
        paused = tmp_path / "paused"
        wait_until(paused.exists, what="the worker at its charge's call", timeout=60, proc=procs[0])
        key = paused.read_text()
        observer = Observer(cluster)
        step_of = "SELECT state, attempts FROM journal_step WHERE key = %s"
        assert observer.rows(step_of, [key]) == [("pending", 1)]

        dead = cluster.kill_primary()
        killed_at = time.monotonic()
        leader = cluster.wait_for_leader(other_than=dead, timeout=90)
        # Committed on the old primary, so on the synchronous standby it became: still there.
        wait_until(
            lambda: observer.rows(step_of, [key]) is not None,
            what="the new primary to answer",
            timeout=60,
        )
        assert observer.rows(step_of, [key]) == [("pending", 1)]
        assert charges_of(payments_sandbox, invoice) == []
        (tmp_path / "go").write_text("")

        def ended() -> bool:
            rows = observer.rows("SELECT status FROM journal_task WHERE id::text = %s", [task_id])
            return rows is not None and rows[0][0] in ("finished", "needs_human")

        wait_until(ended, what="the renewal to end", timeout=150)
        print(
            f"primary {dead.name} killed between the commit and the call; {leader.name} took "
            f"over; the renewal ended {time.monotonic() - killed_at:.1f}s later"
        )
        assert observer.rows("SELECT status FROM journal_task WHERE id::text = %s", [task_id]) == [
            ("finished",)
        ]
        state = observer.rows(step_of, [key])
        assert state is not None and state[0][0] == "done"
        # The provider was asked once under the step's key, and charged the invoice once.
        assert len(payments_sandbox.client.ledger(key=key)) == 1
        assert [c["status"] for c in charges_of(payments_sandbox, invoice)] == ["succeeded"]
    finally:
        end(*procs, timeout=30)
