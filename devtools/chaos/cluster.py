"""The chaos run on a Patroni cluster (``make chaos-cluster``; docs/proof.md).

``python -m devtools.chaos.cluster [manage.py chaos's options]``, under the launcher's
``chaos`` mode (which gives it Redis and a control socket for it): starts etcd and two Patroni
nodes (devtools.cluster: a primary and its synchronous standby, each in a network namespace of
its own when run as root), migrates them as production is migrated, and runs ``manage.py chaos
--cluster`` against them through the multi-host URL, with a control socket of its own through
which the run does the cluster's faults (the same protocol as the launcher's,
devtools.stack.control):

- ``restart failover``: the primary's Patroni and postmaster SIGKILLed, a machine that died;
  once the standby is promoted, the dead node is started again and rejoins as the synchronous
  standby (pg_rewind), in the background;
- ``restart switchover``: a planned switchover to the standby (answered once done);
- ``restart isolate SECONDS``: the primary's host cut from the network for that long (it is
  demoted, the standby promoted; healed, it rejoins);
- ``restart redis``: handed to the launcher's socket (Redis restarted empty).

Each fault waits for the cluster to have its synchronous standby back from the last, so that
no fault finds a cluster that could not fail over. Exits with the chaos command's status.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from devtools.cluster import Cluster, ClusterError, Node
from devtools.process import REPO, ProcessError
from devtools.stack.control import CONTROL_VARIABLE, control_serve, stack_control
from devtools.stack.postgres import APP_ROLE, DATABASE_ROLES, OWNER_ROLE, WEB_ROLE, WORKER_ROLE

MIGRATE_TIMEOUT = 300.0
RECOVERY_TIMEOUT = 150.0


class ClusterFaults:
    """The cluster's faults, one at a time, each after the cluster recovered from the last."""

    def __init__(self, cluster: Cluster, outer_control: str) -> None:
        self.cluster = cluster
        self.outer = outer_control
        self.lock = threading.Lock()
        self.recovering: threading.Thread | None = None
        self.errors: list[str] = []

    def _settled(self) -> None:
        """The last fault's recovery done: a leader and its synchronous standby."""
        if self.recovering is not None:
            self.recovering.join(timeout=RECOVERY_TIMEOUT)
            self.recovering = None
        self.cluster.wait_for_sync_standby(timeout=RECOVERY_TIMEOUT)

    def _in_background(self, recover: Any) -> None:
        def run() -> None:
            try:
                recover()
            except (ProcessError, OSError) as error:
                self.errors.append(str(error))

        self.recovering = threading.Thread(target=run, daemon=True)
        self.recovering.start()

    def failover(self) -> dict[str, Any]:
        self._settled()
        dead = self.cluster.kill_primary()

        def recover() -> None:
            self.cluster.wait_for_leader(other_than=dead, timeout=RECOVERY_TIMEOUT)
            self.cluster.restart_node(dead)
            self.cluster.wait_for_sync_standby(timeout=RECOVERY_TIMEOUT)

        self._in_background(recover)
        return {"killed": dead.name}

    def switchover(self) -> dict[str, Any]:
        self._settled()
        was = self.cluster.leader()
        new = self.cluster.switchover()
        return {"from": was.name if was else None, "to": new.name}

    def isolate(self, seconds: float) -> dict[str, Any]:
        self._settled()
        network = self.cluster.network
        leader = self.cluster.leader()
        if network is None or leader is None:
            raise ClusterError("a partition needs the nodes in namespaces (run as root)")
        network.cut(leader.index)
        healed = threading.Event()

        def recover(node: Node = leader) -> None:
            self.cluster.wait_for_leader(other_than=node, timeout=RECOVERY_TIMEOUT)
            healed.wait(seconds)  # the partition lasts this long, whatever happened in it
            network.heal(node.index)
            self.cluster.wait_for_sync_standby(timeout=RECOVERY_TIMEOUT)

        self._in_background(recover)
        return {"isolated": leader.name, "seconds": seconds}

    def handle(self, request: list[str]) -> dict[str, Any]:
        if request == ["servers"]:
            outer = stack_control("servers", timeout=5.0) if self.outer else None
            redis = ["redis"] if outer and "redis" in outer.get("servers", []) else []
            return {"ok": True, "servers": ["failover", "isolate", "switchover", *redis]}
        if len(request) < 2 or request[0] != "restart":
            return {"ok": False, "error": f"cannot do {' '.join(request)!r}"}
        name = request[1]
        if name == "redis":
            return stack_control("restart redis") or {"ok": False, "error": "no launcher"}
        with self.lock:
            try:
                if name == "failover":
                    said = self.failover()
                elif name == "switchover":
                    said = self.switchover()
                elif name == "isolate" and len(request) == 3:
                    said = self.isolate(float(request[2]))
                else:
                    return {"ok": False, "error": f"cannot do {' '.join(request)!r}"}
            except (ProcessError, OSError, ValueError) as error:
                return {"ok": False, "error": str(error)}
        return {"ok": True, **said}


PROBES = 200


def commit_latency(url: str) -> tuple[float, float]:
    """A one-row commit on the primary, in ms (medians of :data:`PROBES`, interleaved): as
    the app's commits wait for the synchronous standby, and committed locally only
    (``synchronous_commit = local``): the second from the first is what the standby adds."""
    with (
        psycopg.connect(url, autocommit=True) as sync,
        psycopg.connect(url, autocommit=True) as local,
    ):
        sync.execute("CREATE TABLE IF NOT EXISTS chaos_commit_probe (n bigint)")
        local.execute("SET synchronous_commit = local")
        took: dict[str, list[float]] = {"sync": [], "local": []}
        for i in range(PROBES):
            for name, conn in (("sync", sync), ("local", local)):
                began = time.perf_counter()
                conn.execute("INSERT INTO chaos_commit_probe VALUES (%s)", [i])
                took[name].append((time.perf_counter() - began) * 1000)
        sync.execute("DROP TABLE chaos_commit_probe")
    return statistics.median(took["sync"]), statistics.median(took["local"])


JOURNAL_SIZE = (
    "SELECT pg_current_wal_lsn()::text, "
    "(SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
    " WHERE c.relname LIKE 'journal\\_%%' AND c.relkind = 'r'), "
    "(SELECT count(*) FROM journal_task)"
)


def journal_now(url: str) -> tuple[str, float, float]:
    """The primary's WAL position, the journal's tables and indexes in bytes, its tasks."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(JOURNAL_SIZE).fetchone()
    return (str(row[0]), float(row[1]), float(row[2])) if row else ("0/0", 0.0, 0.0)


def capacity(
    url: str,
    *,
    before: tuple[str, float, float],
    steps: int,
    sync_ms: float,
    local_ms: float,
) -> dict[str, Any]:
    """What the run cost the primary, from ``before`` (:func:`journal_now` as it began): WAL
    a step, what the journal grew by a task, and the commit latencies measured before it."""
    lsn, size, tasks = journal_now(url)
    with psycopg.connect(url, autocommit=True) as conn:
        diff = conn.execute(
            "SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", [lsn, before[0]]
        ).fetchone()
    wal = float(diff[0]) if diff else 0.0
    return {
        "wal_bytes_per_step": round(wal / max(1, steps), 1),
        "journal_bytes_per_task": round((size - before[1]) / max(1.0, tasks - before[2]), 1),
        "commit_sync_ms": round(sync_ms, 3),
        "commit_local_ms": round(local_ms, 3),
    }


def _out(argv: list[str]) -> Path | None:
    """The --out file the chaos command writes its figures to, if given."""
    for i, word in enumerate(argv):
        if word == "--out" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if word.startswith("--out="):
            return Path(word.split("=", 1)[1])
    return None


def _env(cluster: Cluster, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "DATABASE_ROLES": DATABASE_ROLES,
        "DATABASE_URL": cluster.url(role=APP_ROLE),
        "DATABASE_WEB_URL": cluster.url(role=WEB_ROLE),
        "DATABASE_WORKER_URL": cluster.url(role=WORKER_ROLE),
    }
    env.pop("DATABASE_OWNER_URL", None)  # only where ``extra`` gives it (migrate)
    env.update(extra)
    return env


def main(argv: list[str]) -> int:
    outer = os.environ.get(CONTROL_VARIABLE, "")
    with Cluster.running() as cluster:
        print(f"cluster: {cluster.url(role=APP_ROLE).split('@')[1]}", file=sys.stderr)
        migrated = subprocess.run(  # noqa: S603 - our own manage.py
            [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
            cwd=REPO,
            env=_env(cluster, DATABASE_OWNER_URL=cluster.url(role=OWNER_ROLE)),
            timeout=MIGRATE_TIMEOUT,
            check=False,
        )
        if migrated.returncode != 0:
            print("cluster: migrate failed", file=sys.stderr)
            return 1
        owner = cluster.url(role=OWNER_ROLE)
        sync_ms, local_ms = commit_latency(owner)
        before = journal_now(owner)
        faults = ClusterFaults(cluster, outer)
        path = cluster.root / "control.sock"
        sock = control_serve(path, faults.handle)
        try:
            ran = subprocess.run(  # noqa: S603 - our own manage.py
                [sys.executable, "manage.py", "chaos", "--cluster", *argv],
                cwd=REPO,
                env=_env(cluster, **{CONTROL_VARIABLE: str(path)}),
                check=False,
            )
        finally:
            with contextlib.suppress(OSError):
                sock.close()
        for error in faults.errors:
            print(f"cluster: a recovery failed: {error}", file=sys.stderr)
        out = _out(argv)
        if out is not None and out.exists():
            figures = json.loads(out.read_text())
            faults._settled()  # a primary to read from
            figures["capacity"] = capacity(
                owner,
                before=before,
                steps=int(figures.get("steps") or 0),
                sync_ms=sync_ms,
                local_ms=local_ms,
            )
            out.write_text(json.dumps(figures, indent=1) + "\n")
        return ran.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
