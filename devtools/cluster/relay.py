"""A service on our loopback (PostgreSQL, Redis, a sandbox provider), reachable from the hosts'
namespaces at the bridge's address, as if it ran on a machine of its own; and cut from one
host at a time, as a partition cuts it.

A relay listens on the bridge's address at the service's own port and copies bytes both ways
to the service on loopback. :meth:`Relay.cut` makes one host lose the service without the
service or the host noticing at once, as a partition does: what is on the wire from that host
goes nowhere, its open connections stop moving (the bytes are held, not forwarded, and no
reset is sent), and its new ones are accepted and then hear nothing. :meth:`Relay.heal`
drops what was held (the host's connections die, as a partition's outlived TCP sessions do
once traffic resumes) and forwards its new connections again.

Tooling: the product never imports it (pyproject.toml's import contracts).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass, field

BUFFER = 65536


@dataclass(eq=False)
class _Pair:
    client: socket.socket
    source: str
    upstream: socket.socket | None = None


@dataclass(eq=False)
class Relay:
    listen: tuple[str, int]
    target: tuple[str, int]
    name: str = ""
    _server: socket.socket | None = None
    _cut: set[str] = field(default_factory=set)
    _pairs: set[_Pair] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopped: threading.Event = field(default_factory=threading.Event)
    accepted: int = 0

    def start(self) -> Relay:
        server = socket.create_server(self.listen, reuse_port=False)
        server.settimeout(0.2)
        self._server = server
        threading.Thread(target=self._accept, name=f"relay {self.name}", daemon=True).start()
        return self

    def _accept(self) -> None:
        server = self._server
        if server is None:
            return
        while not self._stopped.is_set():
            try:
                client, (source, _) = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            pair = _Pair(client, source)
            with self._lock:
                self.accepted += 1
                self._pairs.add(pair)
                cut = source in self._cut
            if cut:
                continue  # accepted, and then nothing: as a partition looks from the host
            threading.Thread(target=self._connect, args=(pair,), daemon=True).start()

    def _connect(self, pair: _Pair) -> None:
        try:
            pair.upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            self._close(pair)
            return
        pair.upstream.settimeout(None)
        for a, b in ((pair.client, pair.upstream), (pair.upstream, pair.client)):
            threading.Thread(target=self._pump, args=(pair, a, b), daemon=True).start()

    def _pump(self, pair: _Pair, src: socket.socket, dst: socket.socket) -> None:
        while True:
            try:
                data = src.recv(BUFFER)
            except OSError:
                break
            if not data:
                break
            with self._lock:
                held = pair.source in self._cut
            if held:
                # Cut: what the host sends, and what is sent to it, goes nowhere. The pair
                # waits here, as TCP waits on a dead path, until it is healed and dropped.
                while not self._stopped.is_set():
                    with self._lock:
                        if pair not in self._pairs:
                            return
                    self._stopped.wait(0.05)
                return
            try:
                dst.sendall(data)
            except OSError:
                break
        self._close(pair)

    def _close(self, pair: _Pair) -> None:
        with self._lock:
            self._pairs.discard(pair)
        for sock in (pair.client, pair.upstream):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()

    def cut(self, source: str) -> None:
        """The host at ``source`` loses this service, as in a partition."""
        with self._lock:
            self._cut.add(source)

    def heal(self, source: str) -> None:
        """The partition ends: the host's connections from before it are dropped (as TCP
        sessions that outlived a partition are reset once traffic flows), new ones work."""
        with self._lock:
            self._cut.discard(source)
            stalled = [p for p in self._pairs if p.source == source]
        for pair in stalled:
            self._close(pair)

    def stop(self) -> None:
        self._stopped.set()
        if self._server is not None:
            with contextlib.suppress(OSError):
                self._server.close()
        with self._lock:
            pairs = list(self._pairs)
        for pair in pairs:
            self._close(pair)
