"""A network namespace for each node, as if each ran on its own host.

A bridge in our own namespace, with an address on a /24 of its own, and for each node a
namespace joined to the bridge by a veth pair: the nodes reach each other across the bridge
(layer 2, so no forwarding is switched on in our namespace), and everything in ours (etcd,
the app, the tests) reaches them at their addresses. Needs root (``ip netns``); the cluster
runs on loopback otherwise. A node's link can be cut and healed (a partition).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass, field

IP = "/usr/sbin/ip"
NSENTER = "/usr/bin/nsenter"
SETPRIV = "/usr/bin/setpriv"
# 10.213.<k>.0/24: k is the first free one from our pid on.
PREFIX = "10.213"


class NetworkError(Exception):
    """A namespace, a link or an address could not be made."""


def _ip(*argv: str) -> str:
    result = subprocess.run(  # noqa: S603 - iproute2, argv as a list
        [IP, *argv], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise NetworkError(f"ip {' '.join(argv)}: {result.stderr.strip()}")
    return result.stdout


def available() -> bool:
    """Whether namespaces can be made here: root, with iproute2, nsenter and setpriv."""
    tools = all(os.access(p, os.X_OK) for p in (IP, NSENTER, SETPRIV))
    return os.geteuid() == 0 and tools


@dataclass
class Network:
    tag: str  # short and unique: interface names are at most 15 characters
    subnet: str
    namespaces: list[str] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"{self.tag}br"

    @property
    def gateway(self) -> str:
        """Our own address on the bridge, where the nodes reach etcd."""
        return f"{self.subnet}.1"

    def address(self, i: int) -> str:
        return f"{self.subnet}.{i + 2}"

    def _veth(self, i: int) -> str:
        return f"{self.tag}h{i}"

    @classmethod
    def create(cls, count: int) -> Network:
        tag = f"ao{os.getpid() % 10**7}"
        subnet = _free_subnet()
        net = cls(tag=tag, subnet=subnet)
        try:
            _ip("link", "add", net.bridge, "type", "bridge")
            _ip("addr", "add", f"{net.gateway}/24", "dev", net.bridge)
            _ip("link", "set", net.bridge, "up")
            for i in range(count):
                net._add_node(i)
        except BaseException:
            net.remove()
            raise
        return net

    def _add_node(self, i: int) -> None:
        ns = f"{self.tag}n{i}"
        _ip("netns", "add", ns)
        self.namespaces.append(ns)
        host, peer = self._veth(i), f"{self.tag}p{i}"
        _ip("link", "add", host, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", ns)
        _ip("link", "set", host, "master", self.bridge)
        _ip("link", "set", host, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", peer)
        _ip("-n", ns, "link", "set", peer, "up")

    def enter(self, i: int, *, uid: int | None, gid: int | None) -> list[str]:
        """The argv prefix that runs a program in node `i`'s namespace, as `uid`:`gid`."""
        argv = [NSENTER, f"--net=/run/netns/{self.namespaces[i]}"]
        if uid is not None and gid is not None:
            argv += [SETPRIV, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]
        return argv

    def cut(self, i: int) -> None:
        """Node `i` loses the network (its link to the bridge goes down)."""
        _ip("link", "set", self._veth(i), "down")

    def heal(self, i: int) -> None:
        _ip("link", "set", self._veth(i), "up")

    def remove(self) -> None:
        """Every namespace and link made; deleting a namespace deletes its end of the veth
        pair, which takes the other end with it."""
        for ns in self.namespaces:
            with contextlib.suppress(NetworkError):
                _ip("netns", "delete", ns)
        self.namespaces.clear()
        with contextlib.suppress(NetworkError):
            _ip("link", "delete", self.bridge)


def _free_subnet() -> str:
    start = os.getpid() % 250
    for step in range(250):
        k = (start + step) % 250 + 1
        subnet = f"{PREFIX}.{k}"
        if not _ip("-4", "route", "show", f"{subnet}.0/24").strip():
            return subnet
    raise NetworkError(f"no free /24 under {PREFIX}.0.0/16")
