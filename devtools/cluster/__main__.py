"""``python -m devtools.cluster``: a Patroni cluster to try the app against by hand.

Starts etcd and two nodes with the app's database and roles, prints the multi-host URLs, then
reads commands, one a line: ``list``, ``kill`` (the primary), ``restart`` (the nodes that were
killed), ``switchover``, ``quit``. Everything stops at ``quit``, end of input or Ctrl-C.
"""

from __future__ import annotations

import sys

from devtools.cluster import Cluster, Node, patronictl_list
from devtools.stack.postgres import APP_ROLE, OWNER_ROLE, WEB_ROLE, WORKER_ROLE


def main() -> int:
    with Cluster.running() as cluster:
        for name, role in (
            ("DATABASE_OWNER_URL", OWNER_ROLE),
            ("DATABASE_URL", APP_ROLE),
            ("DATABASE_URL (web)", WEB_ROLE),
            ("DATABASE_URL (worker)", WORKER_ROLE),
        ):
            print(f"{name}={cluster.url(role=role)}")
        print(patronictl_list(cluster.nodes[0]), flush=True)
        killed: list[Node] = []
        try:
            for line in sys.stdin:
                command = line.strip()
                if command == "quit":
                    break
                if command == "kill":
                    dead = cluster.kill_primary()
                    killed.append(dead)
                    leader = cluster.wait_for_leader(other_than=dead)
                    print(f"killed {dead.name}; {leader.name} leads")
                elif command == "restart":
                    for node in killed:
                        cluster.restart_node(node)
                    killed.clear()
                    standby = cluster.wait_for_sync_standby()
                    print(f"{standby.name} is the synchronous standby")
                elif command == "switchover":
                    print(f"{cluster.switchover().name} leads")
                elif command == "list":
                    print(patronictl_list(cluster.nodes[0]))
                elif command:
                    print("list, kill, restart, switchover or quit")
                sys.stdout.flush()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
