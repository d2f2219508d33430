"""A provider that does nothing, quickly: the far end of the production path's no-op tool.

``python -m devtools.bench.noop_server PORT`` answers, over kept-alive HTTP/1.1 connections,
``POST /v1/noop`` with a made-up object (its id derived from the caller's idempotency key)
and any ``GET`` with an empty list (nothing is kept: the benchmark never needs a lookup).
It stands for the network hop every real tool makes and costs what a loopback HTTP exchange
costs, not what a Python web framework costs: it is a few lines of asyncio, so the figure is
the harness's and the client's, not this server's.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys

_EMPTY_LIST = json.dumps({"data": []}).encode()


def _reply(body: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


class Noop(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].decode("latin-1")
            lines = head.split("\r\n")
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length") or 0)
            if len(self.buffer) < head_end + 4 + length:
                return
            body = self.buffer[head_end + 4 : head_end + 4 + length]
            self.buffer = self.buffer[head_end + 4 + length :]
            if lines[0].startswith("POST"):
                sent = json.loads(body or b"{}")
                key = headers.get("idempotency-key", "")
                made = "nop_" + hashlib.sha256(key.encode()).hexdigest()[:24]
                answer = json.dumps({"id": made, "status": "succeeded", **sent}).encode()
            else:
                answer = _EMPTY_LIST
            self.transport.write(_reply(answer))


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Noop, "127.0.0.1", port)
    print(f"noop provider on {port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
