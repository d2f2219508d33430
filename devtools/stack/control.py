"""Restarting the servers on request: the launcher's control socket, and its client.

The command ``stack.py test`` or ``chaos`` runs may restart the servers the launcher started:
the chaos run restarts PostgreSQL (a crash: immediate shutdown) and Redis (empty), and so do
tests, and only the launcher knows how they were started. One request per connection, a line
each way: ``restart postgres`` or ``restart redis`` → ``{"ok": true, "down_s": 1.2}``;
``servers`` → ``{"ok": true, "servers": [...]}``, the names it can restart. The socket sits
in the launcher's private runtime directory and is its owner's only, like everything there.
Its path reaches the command in ``AGENTOPS_STACK_CONTROL``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from devtools.process import ProcessError
from devtools.stack.base import START_TIMEOUT, log

CONTROL_VARIABLE = "AGENTOPS_STACK_CONTROL"


def stack_control(request: str, timeout: float = 120.0) -> dict[str, Any] | None:
    """Ask the launcher that runs us to act on its servers; None when none runs us."""
    path = os.environ.get(CONTROL_VARIABLE, "")
    if not path:
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
            sock.sendall(request.encode() + b"\n")
            reply = sock.makefile("r").readline()
        except OSError as exc:
            return {"ok": False, "error": f"the stack's control socket: {exc}"}
    answer: dict[str, Any] = json.loads(reply) if reply else {"ok": False, "error": "no reply"}
    return answer


def restartable_servers() -> set[str]:
    """The servers we may restart: those the launcher that runs us started."""
    answer = stack_control("servers", timeout=5.0)
    return set(answer.get("servers", [])) if answer and answer.get("ok") else set()


class Server(Protocol):
    def start(self) -> object: ...

    def stop(self) -> None: ...


def control_serve(
    path: Path,
    handle: Callable[[list[str]], dict[str, Any]],
    *,
    timeout: float | None = None,
) -> socket.socket:
    """A control socket at ``path``, its owner's only: one request a connection, a line each
    way, answered by ``handle`` (the request's words → the reply) on a thread of its own,
    each connection given ``timeout``. Closing the socket ends the thread."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old_umask)
    sock.listen(4)

    def serve() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return  # closed
            with conn:
                conn.settimeout(timeout)
                try:
                    request = conn.makefile("r").readline().split()
                    conn.sendall((json.dumps(handle(request)) + "\n").encode())
                except OSError:
                    continue

    threading.Thread(target=serve, daemon=True).start()
    return sock


class ServerControl:
    """The launcher's end: a UNIX socket at `path`, served by a thread of its own."""

    def __init__(self, path: Path, servers: dict[str, Server]) -> None:
        self.path = path
        self.servers = servers
        self.lock = threading.Lock()
        self.closing = False
        self.sock = control_serve(path, self._handle, timeout=START_TIMEOUT * 2)

    def _handle(self, request: list[str]) -> dict[str, Any]:
        if request == ["servers"]:
            return {"ok": True, "servers": sorted(self.servers)}
        if len(request) != 2 or request[0] != "restart" or request[1] not in self.servers:
            return {"ok": False, "error": f"cannot do {' '.join(request)!r}"}
        name = request[1]
        with self.lock:
            if self.closing:
                return {"ok": False, "error": "stopping"}
            began = time.monotonic()
            server = self.servers[name]
            try:
                server.stop()
                server.start()
            except ProcessError as error:
                return {"ok": False, "error": str(error)}
            down = time.monotonic() - began
        log(f"{name} restarted on request ({down:.1f}s down)")
        return {"ok": True, "down_s": round(down, 3)}

    def close(self) -> None:
        with self.lock:  # waits for a restart under way to finish
            self.closing = True
        with contextlib.suppress(OSError):
            self.sock.close()
        self.path.unlink(missing_ok=True)
