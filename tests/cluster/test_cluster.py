"""The cluster tooling itself (devtools/cluster): a killed primary is replaced with no
acknowledged commit lost, the dead node rejoins as the synchronous standby (pg_rewind), and a
switchover moves the primary back, all through the one multi-host URL the app is given."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

from devtools.cluster import Cluster
from devtools.process import wait_until
from devtools.stack.postgres import OWNER_ROLE

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with Cluster.running() as running:
        yield running


def _write(url: str, value: int) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2, autocommit=True) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS marks (n int PRIMARY KEY)")
            conn.execute("INSERT INTO marks VALUES (%s) ON CONFLICT DO NOTHING", [value])
        return True
    except psycopg.OperationalError:
        return False


def _marks(url: str) -> list[int]:
    with psycopg.connect(url, connect_timeout=2, autocommit=True) as conn:
        return [n for (n,) in conn.execute("SELECT n FROM marks ORDER BY n")]


def test_kill_rejoin_and_switch_over_lose_no_acknowledged_commit(cluster: Cluster) -> None:
    url = cluster.url(role=OWNER_ROLE)
    first = cluster.wait_for_leader()
    assert _write(url, 1)

    dead = cluster.kill_primary()
    killed = time.monotonic()
    wait_until(lambda: _write(url, 2), what="a write after the failover", timeout=60)
    print(f"a write went through {time.monotonic() - killed:.1f}s after the primary's death")
    second = cluster.wait_for_leader(other_than=dead)
    assert second is not first
    assert _marks(url) == [1, 2]

    cluster.restart_node(dead)
    standby = cluster.wait_for_sync_standby(timeout=90)
    assert standby is dead

    moved = time.monotonic()
    leader = cluster.switchover()
    assert leader is dead
    wait_until(lambda: _write(url, 3), what="a write after the switchover", timeout=60)
    print(f"a write went through {time.monotonic() - moved:.1f}s after the switchover began")
    assert _marks(url) == [1, 2, 3]


def test_a_primary_cut_from_the_network_is_replaced_and_rejoins_as_a_standby(
    cluster: Cluster,
) -> None:
    """A partition, not a death: the primary's host loses its link. It cannot renew its key in
    etcd, so Patroni demotes it while the standby, once the key has expired, is promoted; the
    app's URL finds the new one. Healed, the old primary comes back as the standby."""
    assert cluster.network is not None, "run as root: the nodes need namespaces of their own"
    url = cluster.url(role=OWNER_ROLE)
    first = cluster.wait_for_leader()
    assert _write(url, 1)
    cluster.network.cut(first.index)
    cut = time.monotonic()
    wait_until(lambda: _write(url, 2), what="a write after the partition", timeout=60)
    print(f"a write went through {time.monotonic() - cut:.1f}s after the primary was cut off")
    assert cluster.wait_for_leader(other_than=first) is not first
    cluster.network.heal(first.index)
    assert cluster.wait_for_sync_standby(timeout=90) is first
    assert _marks(url) == [1, 2]
