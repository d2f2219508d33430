"""A provider that does nothing, quickly: the far end of the production path's no-op tool.

``python -m devtools.bench.noop_server PORT`` answers, over kept-alive HTTP/1.1 connections,
``POST /v1/noop`` with a made-up object (its id derived from the caller's idempotency key,
its status ``succeeded``) and any ``GET`` with an empty list (nothing is kept: the benchmark
never needs a lookup). It stands for the network hop every real tool makes and costs what a
loopback HTTP exchange costs, not what a web framework costs: a thread per connection reads
its requests with blocking calls (no event loop woken in between), finds the two headers it
needs and skips the body unread, so the figure is the harness's and the client's, not this
server's.
"""

from __future__ import annotations

import hashlib
import json
import socket
import sys
import threading

_EMPTY_LIST = json.dumps({"data": []}).encode()
_LENGTH = b"\r\ncontent-length:"
_KEY = b"\r\nidempotency-key:"


def _reply(body: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


def _header(head: bytes, lowered: bytes, name: bytes) -> bytes:
    start = lowered.find(name)
    if start < 0:
        return b""
    start += len(name)
    end = lowered.find(b"\r\n", start)
    return head[start : end if end >= 0 else len(head)].strip()


def _made(key: bytes) -> bytes:
    made = "nop_" + hashlib.sha256(key).hexdigest()[:24]
    return json.dumps({"id": made, "status": "succeeded"}).encode()


def _serve(conn: socket.socket) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buffer = b""
    with conn:
        while True:
            head_end = buffer.find(b"\r\n\r\n")
            if head_end < 0:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buffer += chunk
                continue
            head = buffer[:head_end]
            lowered = head.lower()
            length = int(_header(head, lowered, _LENGTH) or 0)
            while len(buffer) < head_end + 4 + length:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buffer += chunk
            buffer = buffer[head_end + 4 + length :]
            if head.startswith(b"POST"):
                conn.sendall(_reply(_made(_header(head, lowered, _KEY))))
            else:
                conn.sendall(_reply(_EMPTY_LIST))


def serve(port: int) -> None:
    listener = socket.create_server(("127.0.0.1", port), backlog=64)
    print(f"noop provider on {port}", flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    serve(int(sys.argv[1]))
