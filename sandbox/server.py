"""The HTTP layer of the sandbox providers: a threaded server on 127.0.0.1 (HTTP/1.1,
connections kept alive as a real provider's are), the request handler that parses a request
and refuses one whose Host or Origin is not ours, the Stripe-style form decoding, and the
command line (``serve``).

Standard library only. Requests are handled concurrently (one thread per connection). A
provider that goes "down" closes its listening socket and every kept-alive connection that is
waiting for its next request; one that is answering a request closes once it has answered:
so "down" refuses every new request, as it did when each request had its own connection.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import signal
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from sandbox.wire import (
    JSON,
    ApiError,
    DropConnection,
    Request,
    Response,
    invalid,
    new_id,
    refusal_body,
)

if TYPE_CHECKING:
    from sandbox.provider import Provider

# The names a client may use for a server bound to 127.0.0.1.
LOOPBACK_NAMES = ("127.0.0.1", "localhost")


# ---------------------------------------------------------------------------- parsing


def parse_form(pairs: list[tuple[str, str]]) -> JSON:
    """Decode Stripe-style nested form keys: ``a[b]=1``, ``a[]=x``, ``a[0][b]=y``."""
    out: JSON = {}
    for raw_key, value in pairs:
        m = re.match(r"^([^\[\]]+)((?:\[[^\[\]]*\])*)$", raw_key)
        if not m:
            out[raw_key] = value
            continue
        parts = [m.group(1), *re.findall(r"\[([^\[\]]*)\]", m.group(2))]
        node: Any = out
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            nxt = None if last else parts[i + 1]
            container: Any = [] if nxt == "" else {}
            if isinstance(node, list):
                if last:
                    node.append(value)
                elif part == "" or not node or not isinstance(node[-1], dict):
                    node.append(container)
                    node = node[-1]
                else:
                    node = node[-1]
            elif last:
                node[part] = value
            else:
                if not isinstance(node.get(part), (dict, list)):
                    node[part] = container
                node = node[part]
    return {k: v if k == "metadata" else _listify(v) for k, v in out.items()}


def _listify(value: Any) -> Any:
    """Turn ``{"0": a, "1": b}`` (from ``x[0]=a&x[1]=b``) into ``[a, b]``, recursively."""
    if isinstance(value, list):
        return [_listify(v) for v in value]
    if isinstance(value, dict):
        if value and all(k.isdigit() for k in value):
            return [_listify(value[k]) for k in sorted(value, key=int)]
        return {k: _listify(v) for k, v in value.items()}
    return value


# ---------------------------------------------------------------------------- HTTP layer


class SandboxServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, port: int, provider: Provider) -> None:
        self.provider = provider
        self._serve_thread: threading.Thread | None = None
        self._state_lock = threading.Lock()
        self._closed = False
        self._down = False
        # Kept-alive connections waiting for their next request (their handlers idle).
        self._idle: set[socket.socket] = set()
        super().__init__(("127.0.0.1", port), _RequestHandler)
        provider.server = self

    @property
    def down(self) -> bool:
        return self._down

    def idle(self, sock: socket.socket, waiting: bool) -> None:
        with self._state_lock:
            if waiting:
                self._idle.add(sock)
            else:
                self._idle.discard(sock)

    def _close_idle(self) -> None:
        """Close every kept-alive connection waiting for a request (the caller holds the
        state lock): its next request must find the provider down."""
        for sock in list(self._idle):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._idle.clear()

    def start(self) -> None:
        self._serve_thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._serve_thread.start()

    def stop(self) -> None:
        with self._state_lock:
            self._closed = True
            self.shutdown()
            self.server_close()

    def go_down(self, seconds: float) -> None:
        """Close the listening socket now; listen again on the same port after ``seconds``."""
        with self._state_lock:
            if self._down:
                raise invalid("the provider is already down")
            self._down = True
            self.shutdown()  # waits for serve_forever (running in its own thread) to return
            self.socket.close()
            self._close_idle()
        timer = threading.Timer(seconds, self._come_back)
        timer.daemon = True
        timer.start()

    def _come_back(self) -> None:
        with self._state_lock:
            if self._closed:
                return
            host, port = self.server_address[0], self.server_address[1]
            self.socket = socket.socket(self.address_family, self.socket_type)
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            deadline = time.monotonic() + 5
            while True:
                try:
                    self.socket.bind((host, port))
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            self.server_activate()
            self._down = False
            self.start()


class _RequestHandler(BaseHTTPRequestHandler):
    server: SandboxServer
    protocol_version = "HTTP/1.1"
    server_version = "sandbox"
    sys_version = ""
    # A kept-alive connection idle this long is closed (its thread ends).
    timeout = 60
    # A reply is its headers, then its body: without this, the body waits for the client to
    # acknowledge the headers, which it delays (Nagle's algorithm against delayed ACKs: some
    # 40 ms a request on a kept-alive connection).
    disable_nagle_algorithm = True
    # ...and leaves in one write: buffered, flushed once the reply is whole (``_send``, and the
    # stdlib after each request). Unbuffered, the headers and the body were a send each.
    wbufsize = 1 << 16

    def handle_one_request(self) -> None:
        self.server.idle(self.connection, True)
        try:
            self.raw_requestline = self.rfile.readline(65537)
        except OSError:
            self.raw_requestline = b""
        finally:
            self.server.idle(self.connection, False)
        if not self.raw_requestline:
            self.close_connection = True
            return
        if len(self.raw_requestline) > 65536:
            self.requestline = ""
            self.request_version = ""
            self.command = ""
            self.send_error(414)
            return
        if not self.parse_request():
            return
        method = getattr(self, "do_" + self.command, None)
        if method is None:
            self.send_error(501, f"Unsupported method ({self.command!r})")
            return
        method()
        self.wfile.flush()
        if self.server.down:
            self.close_connection = True  # answered: the next request finds it down

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._dispatch()

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch()

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch()

    def _dispatch(self) -> None:
        provider = self.server.provider
        request_id = new_id("req_", 14)
        split = urlsplit(self.path)
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            matched = provider.match(self.command, split.path)
        except ApiError as exc:
            self._send(Response(exc.status, exc.body, {"Request-Id": request_id}))
            return
        if matched is None:
            self._send(
                Response(
                    404,
                    {
                        "error": {
                            "type": "invalid_request_error",
                            "message": f"Unrecognized request URL ({self.command}: {split.path}).",
                        }
                    },
                    {"Request-Id": request_id},
                )
            )
            return
        route, route_params = matched
        refused = self._refusal(headers, admin=route.operation is None)
        if refused is not None:
            self._send(Response(refused[0], refused[1], {"Request-Id": request_id}))
            return
        # "reset before read": decided before the body is read, so the peer gets an RST with
        # its request unread.
        body = b""
        try:
            if route.operation is not None and provider.faults.take_reset(route.operation):
                key = headers.get("idempotency-key") or None
                provider.note_fault("reset_before_read", route.operation, key=key)
                self._abort(rst=True)
                return
            length = int(headers.get("content-length", "0") or 0)
            body = self.rfile.read(length) if length else b""
            query = parse_form(parse_qsl(split.query, keep_blank_values=True))
            params = self._parse_body(body, headers.get("content-type", ""))
        except ApiError as exc:
            self._send(Response(exc.status, exc.body, {"Request-Id": request_id}))
            return
        if self.command == "GET":
            params = query
        request = Request(
            method=self.command,
            path=split.path,
            query=query,
            headers=headers,
            body=body,
            params=params,
            route_params=route_params,
            request_id=request_id,
        )
        try:
            response = provider.handle(request, route)
        except DropConnection as drop:
            self._abort(rst=drop.rst)
            return
        except Exception as exc:  # noqa: BLE001 - a bug must still produce a reply
            response = Response(
                500,
                {"error": {"type": "api_error", "message": f"sandbox bug: {exc!r}"}},
            )
        response.headers.setdefault("Request-Id", request_id)
        self._send(response)

    def _refusal(self, headers: dict[str, str], *, admin: bool) -> tuple[int, JSON] | None:
        """Why a request must not reach the provider at all, as (status, body); or None.

        The sandbox listens on loopback, but a browser on this machine can still be made to
        talk to it: by a page on another site (a cross-origin form post), or through a name
        that an attacker's DNS points at 127.0.0.1 (rebinding). So the Host must name this
        server, and the admin endpoints, which change how the provider behaves, take only
        same-origin JSON: a cross-site form cannot send that, nor set the header.
        """
        port = self.server.server_address[1]
        names = (*LOOPBACK_NAMES, *self.server.provider.config.get("host_names", ()))
        own_hosts = {f"{name}:{port}" for name in names} | set(names)
        host = headers.get("host", "").lower()
        if host not in own_hosts:
            return 421, refusal_body("misdirected_request", f"Host {host!r} is not this server")
        if not admin or self.command == "GET":
            return None
        origin = headers.get("origin")
        if origin is not None and origin.lower() not in {f"http://{h}" for h in own_hosts}:
            return 403, refusal_body("cross_origin", f"requests from {origin!r} are not accepted")
        if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return 403, refusal_body("cross_origin", "cross-site requests are not accepted")
        if self.command == "POST" and not headers.get("content-type", "").startswith(
            "application/json"
        ):
            return 415, refusal_body("unsupported_media_type", "admin endpoints take JSON only")
        return None

    @staticmethod
    def _parse_body(body: bytes, content_type: str) -> JSON:
        if not body:
            return {}
        text = body.decode("utf-8", errors="replace")
        if "json" in content_type or text.lstrip().startswith("{"):
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise invalid(f"Invalid JSON body: {exc}") from exc
            if not isinstance(data, dict):
                raise invalid("The JSON body must be an object")
            return data
        return parse_form(parse_qsl(text, keep_blank_values=True))

    def _send(self, response: Response) -> None:
        payload = (
            response.raw
            if response.raw is not None
            else json.dumps(response.body, indent=2).encode()
        )
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            self.send_header("Content-Length", str(len(payload)))
            if self.server.down or self.close_connection:
                self.send_header("Connection", "close")
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
        except OSError:
            pass  # the client went away (it timed out): the effect stands, the reply is lost

    def _abort(self, rst: bool) -> None:
        sock = self.connection
        with contextlib.suppress(OSError):
            if rst:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            else:
                sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()
        self.close_connection = True
        # Stop the stdlib from writing or flushing on the closed socket.
        self.wfile = _NullWriter()  # type: ignore[assignment]


class _NullWriter:
    closed = False

    def write(self, data: bytes) -> int:
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------- CLI


def base_arg_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--key-lifetime", type=float, default=86400.0, help="idempotency key lifetime, s"
    )
    parser.add_argument(
        "--retain-seconds",
        type=float,
        default=None,
        help="forget what was made longer ago than this, s (default: a week)",
    )
    return parser


def serve(provider: Provider, port: int, *, retain_seconds: float | None = None) -> None:
    """Listen on 127.0.0.1:port, print the ready line, run until SIGTERM/SIGINT."""
    if retain_seconds is not None:
        provider.apply_config({"retain_seconds": retain_seconds})
    server = SandboxServer(port, provider)
    stop = threading.Event()

    def _on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    server.start()
    print(f"ready on http://127.0.0.1:{server.server_address[1]}", flush=True)
    while not stop.wait(0.2):
        pass
    server.stop()
    provider_stop = getattr(provider, "stop", None)
    if callable(provider_stop):
        provider_stop()
    sys.stdout.flush()
