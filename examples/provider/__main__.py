"""A provider of vouchers that keeps the contract an ``HttpTool`` relies on, in the standard
library alone: what docs/your-own/provider-contract.md asks of a provider, and nothing else
(no faults, no admin API: ``sandbox/`` has those). tests/test_example_provider.py replays
every request and answer of that page against it.

- ``POST /v1/vouchers`` with a JSON body and an ``Idempotency-Key`` header: makes a voucher,
  ``201`` and the voucher, which keeps the body's ``reference`` (the step's key) for as long
  as the voucher exists. The same key with the same body again, while the key lives: the
  first answer again, and nothing more is made. The same key with another body: ``400``
  ``idempotency_error``. After ``--key-lifetime`` seconds the key is forgotten: a request
  with it is a new request.
- ``GET /v1/vouchers?reference=KEY``: ``200`` and ``{"object": "list", "data": [...]}``, the
  vouchers carrying that reference (none: an empty ``data``).
- A voucher over ``LIMIT`` is refused: ``402`` ``amount_too_large``, nothing made.

Ids are ``vch_0001``, ``vch_0002``… in the order made, so a fresh process answers as the page
says, byte for byte.

Run: ``python -m examples.provider --port 8110 [--key-lifetime SECONDS]``; it prints
``ready on http://127.0.0.1:PORT`` and stops on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

LIMIT = 50_000  # minor units: a voucher worth more is refused
CURRENCIES = ("eur", "usd", "gbp")


class Vouchers:
    """The provider's state: its vouchers and the idempotency keys it remembers."""

    def __init__(self, key_lifetime: float) -> None:
        self.key_lifetime = key_lifetime
        self.lock = threading.Lock()
        self.vouchers: list[dict[str, Any]] = []
        # key -> (when first used, the body it came with, the answer given)
        self.keys: dict[str, tuple[float, Any, tuple[int, dict[str, Any]]]] = {}

    def create(self, key: str | None, body: Any) -> tuple[int, dict[str, Any], dict[str, str]]:
        if not key:
            return _error(400, "invalid_request_error", "parameter_missing", "Idempotency-Key")
        with self.lock:  # one request per key at a time: a second waits, then is a replay
            now = time.monotonic()
            kept = self.keys.get(key)
            if kept is not None and now - kept[0] >= self.key_lifetime:
                del self.keys[key]  # forgotten: what comes with it now is a new request
                kept = None
            if kept is not None:
                if kept[1] != body:
                    # Its type, and no code: agentops reads an error's code, else its type.
                    return _error(
                        400, "idempotency_error", "", f"the key {key} was used with other arguments"
                    )
                status, answer = kept[2]
                return status, answer, {"Idempotent-Replayed": "true"}
            status, answer, _ = result = self._make(body)
            if status < 500:  # the answer owed to this key from now on
                self.keys[key] = (now, body, (status, answer))
            return result

    def _make(self, body: Any) -> tuple[int, dict[str, Any], dict[str, str]]:
        if not isinstance(body, dict):
            return _error(400, "invalid_request_error", "body_invalid", "a JSON object")
        for name in ("order", "reference"):
            if not isinstance(body.get(name), str) or not body[name]:
                return _error(400, "invalid_request_error", "parameter_missing", name)
        amount, currency = body.get("amount"), body.get("currency")
        if not isinstance(amount, int) or isinstance(amount, bool) or amount < 1:
            return _error(400, "invalid_request_error", "parameter_invalid", "amount")
        if currency not in CURRENCIES:
            return _error(400, "invalid_request_error", "parameter_invalid", "currency")
        if amount > LIMIT:
            return _error(402, "voucher_error", "amount_too_large", f"over {LIMIT}")
        voucher = {
            "id": f"vch_{len(self.vouchers) + 1:04d}",
            "object": "voucher",
            "order": body["order"],
            "amount": amount,
            "currency": currency,
            "reference": body["reference"],
            "status": "issued",
        }
        self.vouchers.append(voucher)
        return 201, dict(voucher), {}

    def listed(self, reference: str | None) -> dict[str, Any]:
        with self.lock:
            data = [dict(v) for v in self.vouchers if reference in (None, v["reference"])]
        return {"object": "list", "data": data}


def _error(
    status: int, kind: str, code: str, message: str
) -> tuple[int, dict[str, Any], dict[str, str]]:
    error = {"type": kind, "code": code, "message": message}
    if not code:
        del error["code"]
    return status, {"error": error}, {}


def handler_for(state: Vouchers) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            if urlsplit(self.path).path != "/v1/vouchers":
                return self.answer(*_error(404, "invalid_request_error", "no_route", self.path))
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"null")
            except ValueError:
                body = None
            self.answer(*state.create(self.headers.get("Idempotency-Key"), body))

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            parts = urlsplit(self.path)
            if parts.path != "/v1/vouchers":
                return self.answer(*_error(404, "invalid_request_error", "no_route", self.path))
            reference = parse_qs(parts.query).get("reference", [None])[0]
            self.answer(200, state.listed(reference), {})

        def answer(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m examples.provider")
    parser.add_argument("--port", type=int, default=8110)
    parser.add_argument(
        "--key-lifetime", type=float, default=86400.0, help="seconds a key is remembered"
    )
    args = parser.parse_args(argv)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler_for(Vouchers(args.key_lifetime)))
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"ready on http://127.0.0.1:{server.server_port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    sys.exit(0)


if __name__ == "__main__":
    main()
