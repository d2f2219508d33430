"""HTTP/1.1 to a provider reached directly, on kept-alive connections (docs/design.md §2).

urllib3 (with http.client beneath it) spends more of a step's CPU than the journal does: its
pool's bookkeeping, header objects, and the e-mail parser that reads a response's headers.
This is what a call needs of it and no more: a request written in one buffer, a response
read by its length (or its chunks, or to the connection's close), and the connection kept
for the next call when both sides keep it. It also says, as an exception's type, whether any
byte of the request can have left (:class:`NotSentError`), which is what a step's outcome
turns on (``agentops.effects._http.observe_exception``):

- a refused or timed-out connection, a name that does not resolve, and a TLS handshake that
  fails (a certificate that does not verify) all happen before the request is written:
  nothing was sent;
- after the first byte of the request is handed to the socket, any failure may follow a
  request the provider received: a read that times out is :class:`ReadTimedOut`, anything
  else (a reset, a close before the answer, an answer that is not HTTP) as it is.

Nothing is retried here, and no redirect is followed. A connection kept from an earlier call
that the provider has closed meanwhile is noticed before it is written to (it reads as ready:
the provider's close) and a fresh one is made instead, as urllib3 does; a provider that closes
it in the instant between that check and the write makes the call interrupted, never repeated.

Used for ``http`` and ``https`` origins without a proxy or credentials in the address; the rest
goes through urllib3 (``agentops.effects._http``).
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import quote

MAX_HEAD = 64 * 1024
"""The most a response's status line and headers may take."""
MAX_BODY = 32 * 1024 * 1024
"""The most a response's body may take: a provider's JSON answer is far smaller."""
MAX_IDLE = 10
"""Connections kept per origin and process."""
_CHUNK = 65536
_SAFE = "/?&=%:@!$'()*+,;~-._[]"  # everything a target may hold as it is (RFC 3986)


class NotSentError(OSError):
    """Nothing of the request can have left: no connection was made (refused, timed out, a
    name that does not resolve, a handshake that failed) or the request could not be
    written as HTTP at all. ``name`` is the cause's type."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


class ReadTimedOut(TimeoutError):
    """The request was written, and no answer came in time."""


class ProtocolError(OSError):
    """The answer was not HTTP/1.x as a provider speaks it, or was too large."""


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    data: bytes


@dataclass
class Origin:
    """A provider's host and port (and TLS context, for https), and the idle connections to
    it. One per address and process (agentops.effects._http keeps them: a forked child makes
    its own, never using its parent's connections)."""

    host: str
    port: int
    host_header: str
    context: ssl.SSLContext | None
    idle: list[socket.socket] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def connect(self, timeout: float) -> socket.socket:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=timeout)
        except OSError as exc:  # refused, unreachable, timed out, unresolved: never sent
            raise NotSentError(
                _name(exc), f"could not connect to {self.host_header}: {exc}"
            ) from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.context is not None:
                sock = self.context.wrap_socket(sock, server_hostname=self.host)
        except OSError as exc:  # the handshake: before the request, so never sent either
            sock.close()
            raise NotSentError(_name(exc), f"TLS with {self.host_header} failed: {exc}") from exc
        return sock

    def take(self) -> socket.socket | None:
        """An idle connection the provider has not closed meanwhile, or None."""
        while True:
            with self.lock:
                if not self.idle:
                    return None
                sock = self.idle.pop()
            if not _readable(sock):
                return sock
            sock.close()  # closed by the provider (or it sent what nobody asked for)

    def give_back(self, sock: socket.socket) -> None:
        with self.lock:
            if len(self.idle) < MAX_IDLE:
                self.idle.append(sock)
                return
        sock.close()


def _name(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "ConnectTimeout"
    return type(exc).__name__


def _readable(sock: socket.socket) -> bool:
    """Whether the connection has something to read (an idle one: the provider's close).
    poll, not select: a process with more than 1,024 files open would find every connection
    "readable" and never keep one."""
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


_contexts: dict[str | None, ssl.SSLContext] = {}


def origin_for(scheme: str, host: str, port: int | None, ca: str | None) -> Origin:
    """A new :class:`Origin` for the address, with the TLS context for ``ca`` (the CA bundle)
    when the scheme is https: one per bundle and process, made once."""
    context = None
    if scheme == "https":
        context = _contexts.get(ca)
        if context is None:
            context = _contexts[ca] = ssl.create_default_context(cafile=ca)
            context.set_alpn_protocols(["http/1.1"])
    default = 443 if scheme == "https" else 80
    bare = f"[{host}]" if ":" in host else host  # an IPv6 address, as a Host header has it
    return Origin(
        host=host,
        port=port or default,
        host_header=f"{bare}:{port}" if port not in (None, default) else bare,
        context=context,
    )


def request(
    origin: Origin,
    method: str,
    target: str,
    *,
    body: bytes | None,
    headers: dict[str, str],
    timeout: float,
) -> Response:
    """One exchange: the request written, its answer read, the connection kept when it may be."""
    message = _message(origin, method, target, body, headers)
    sock = origin.take()
    if sock is None:
        sock = origin.connect(timeout)
    keep = False
    try:
        sock.settimeout(timeout)
        try:
            sock.sendall(message)
            response, keep = _read(sock, head_only=method == "HEAD")
        except TimeoutError as exc:
            raise ReadTimedOut(f"no answer from {origin.host_header} within {timeout:g} s") from exc
    finally:
        if keep:
            origin.give_back(sock)
        else:
            sock.close()
    return response


def _message(
    origin: Origin, method: str, target: str, body: bytes | None, headers: dict[str, str]
) -> bytes:
    lines = [f"{method} {_quoted(target)} HTTP/1.1", f"Host: {origin.host_header}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body or b'')}")
    text = "\r\n".join(lines)
    # Each line ends where it should: no header carries a line break, a NUL or (in its name)
    # a colon of its own. Told header by header only when the whole says one does.
    breaks = len(lines) - 1
    if text.count("\r") != breaks or text.count("\n") != breaks or "\0" in text:
        _refuse_header(headers)
    for name in headers:
        if ":" in name:
            _refuse_header({name: ""})
    try:
        head = (text + "\r\n\r\n").encode("latin-1")
    except UnicodeEncodeError as exc:
        raise NotSentError("InvalidHeader", f"a header is not Latin-1: {exc}") from exc
    return head + body if body else head


@lru_cache(maxsize=1024)
def _quoted(target: str) -> str:
    return quote(target, safe=_SAFE)


def _refuse_header(headers: dict[str, str]) -> None:
    for name, value in headers.items():
        if any(c in name or c in value for c in "\r\n\0") or ":" in name:
            raise NotSentError("InvalidHeader", f"header {name!r} cannot be written as HTTP")
    raise NotSentError("InvalidHeader", "the request's line cannot be written as HTTP")


class _Reader:
    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer = sock, bytearray()

    def fill(self) -> bool:
        chunk = self.sock.recv(_CHUNK)
        if not chunk:
            return False
        self.buffer += chunk
        return True

    def head(self) -> bytes:
        """A status line and its headers, up to the empty line that ends them (not kept)."""
        searched = 0
        while True:
            end = self.buffer.find(b"\r\n\r\n", searched)
            if end >= 0:
                head = bytes(self.buffer[:end])
                del self.buffer[: end + 4]
                return head
            if len(self.buffer) > MAX_HEAD:
                raise ProtocolError("the answer's headers are too large")
            if len(self.buffer) >= 7 and not self.buffer.startswith(b"HTTP/1."):
                # Told at once, not once the other side stops talking.
                raise ProtocolError(f"not an HTTP answer: {bytes(self.buffer[:80])!r}")
            searched = max(0, len(self.buffer) - 3)
            if not self.fill():
                raise ConnectionResetError("the provider closed the connection mid-answer")

    def line(self, limit: int) -> bytes:
        while True:
            end = self.buffer.find(b"\r\n")
            if end >= 0:
                line = bytes(self.buffer[:end])
                del self.buffer[: end + 2]
                return line
            if len(self.buffer) > limit:
                raise ProtocolError("a line of the answer is too long")
            if not self.fill():
                raise ConnectionResetError("the provider closed the connection mid-answer")

    def exactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            if not self.fill():
                raise ConnectionResetError("the provider closed the connection mid-answer")
        data = bytes(self.buffer[:n])
        del self.buffer[:n]
        return data

    def rest(self) -> bytes:
        while self.fill():
            if len(self.buffer) > MAX_BODY:
                raise ProtocolError("the answer is too large")
        return bytes(self.buffer)


def _read(sock: socket.socket, *, head_only: bool) -> tuple[Response, bool]:
    """The answer, and whether the connection may carry another request."""
    reader = _Reader(sock)
    while True:
        status_line, *lines = reader.head().split(b"\r\n")
        version, _, rest = status_line.partition(b" ")
        code = rest[:3]
        if not version.startswith(b"HTTP/1.") or not code.isdigit():
            raise ProtocolError(f"not an HTTP answer: {status_line[:80]!r}")
        status = int(code)
        headers: dict[str, str] = {}
        for line in lines:
            name, sep, value = line.partition(b":")
            if not sep:
                raise ProtocolError(f"not a header: {line[:80]!r}")
            key = name.strip().decode("latin-1").lower()
            text = value.strip().decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        if status >= 200 or status == 101:
            break  # 1xx (a 100 Continue nobody asked for) comes before the answer itself
    keep = version == b"HTTP/1.1" and "close" not in headers.get("connection", "").lower()
    response, keep = _body(reader, status, headers, keep=keep, head_only=head_only)
    return response, keep and not reader.buffer  # nothing asked for may wait on a kept one


def _body(
    reader: _Reader, status: int, headers: dict[str, str], *, keep: bool, head_only: bool
) -> tuple[Response, bool]:
    if head_only or status in (204, 304) or 100 <= status < 200:
        return Response(status, headers, b""), keep
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return Response(status, headers, _chunked(reader)), keep
    length = headers.get("content-length")
    if length is not None:
        if not length.isdigit() or int(length) > MAX_BODY:
            raise ProtocolError(f"a length the answer cannot have: {length[:40]!r}")
        return Response(status, headers, reader.exactly(int(length))), keep
    return Response(status, headers, reader.rest()), False  # to the close


def _chunked(reader: _Reader) -> bytes:
    body = bytearray()
    while True:
        size_line = reader.line(1024).split(b";", 1)[0].strip()
        try:
            size = int(size_line, 16)
        except ValueError:
            raise ProtocolError(f"not a chunk's size: {size_line[:40]!r}") from None
        if size == 0:
            while reader.line(MAX_HEAD):  # trailers, up to the empty line
                pass
            return bytes(body)
        if len(body) + size > MAX_BODY:
            raise ProtocolError("the answer is too large")
        body += reader.exactly(size)
        if reader.exactly(2) != b"\r\n":
            raise ProtocolError("a chunk does not end where its size says")
