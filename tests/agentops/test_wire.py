"""Providers reached directly are called over agentops.effects._wire: these tests stand a
provider up on a socket of their own, answering byte for byte as each case needs, and check
what ``http_call`` reports — above all, that *nothing was sent* is said only when nothing can
have left, and that a kept-alive connection the provider closed is never taken for an answer.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
import trustme

from agentops.effects import _wire, http_call
from agentops.effects._http import _pool
from journal.outcomes import Interrupted, NotSent, Reply
from tests.sandbox.fixtures import wait_for

Handler = Callable[[socket.socket, "Provider"], None]


class Provider:
    """A listening socket, and what its connections saw: each is handed to ``handler``."""

    def __init__(self, handler: Handler, context: ssl.SSLContext | None = None) -> None:
        self.handler, self.context = handler, context
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.requests: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            if self.context is not None:
                try:
                    conn = self.context.wrap_socket(conn, server_side=True)
                except (OSError, ssl.SSLError):
                    conn.close()
                    continue
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            self.handler(conn, self)

    def read_request(self, conn: socket.socket) -> bytes | None:
        """One request's head and body (by its Content-Length), or None at the close."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length:
            body += conn.recv(65536)
        self.requests.append(head + b"\r\n\r\n" + body)
        return head

    @property
    def url(self) -> str:
        scheme = "https" if self.context is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.listener.close()


@contextlib.contextmanager
def provider(handler: Handler, context: ssl.SSLContext | None = None) -> Iterator[Provider]:
    p = Provider(handler, context)
    try:
        yield p
    finally:
        p.close()


OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{"id": "x_1"}'


def answering(*answers: bytes) -> Handler:
    """Answers each request on a connection with the next answer, keeping it open."""

    def handle(conn: socket.socket, p: Provider) -> None:
        for answer in answers:
            if p.read_request(conn) is None:
                return
            conn.sendall(answer)
        p.read_request(conn)  # then wait for the client to close it

    return handle


def call(url: str, *, timeout: float = 5.0, headers: Mapping[str, str] | None = None) -> object:
    return http_call(
        "POST", url + "/v1/things", key="k-1", timeout=timeout, json={"a": 1}, headers=headers
    )


def test_calls_share_one_kept_alive_connection() -> None:
    with provider(answering(OK, OK, OK)) as p:
        seen = [call(p.url) for _ in range(3)]
    assert seen == [Reply(200, evidence={"id": "x_1"})] * 3
    assert p.connections == 1
    first = p.requests[0]
    assert first.startswith(b"POST /v1/things HTTP/1.1\r\n")
    assert b"\r\nIdempotency-Key: k-1\r\n" in first
    assert b"\r\nContent-Length: 8\r\n" in first and first.endswith(b'{"a": 1}')


def test_a_kept_connection_the_provider_closed_is_replaced_not_reported() -> None:
    closed = threading.Event()

    def once_then_close(conn: socket.socket, p: Provider) -> None:
        p.read_request(conn)
        conn.sendall(OK)
        conn.shutdown(socket.SHUT_RDWR)  # its idle timeout, say
        closed.set()

    with provider(once_then_close) as p:
        assert call(p.url) == Reply(200, evidence={"id": "x_1"})
        assert closed.wait(5)
        # The kept connection, whose close is on the wire before the next call looks at it.
        origin = _pool(p.url)
        assert isinstance(origin, _wire.Origin) and len(origin.idle) == 1
        wait_for(lambda: _wire._readable(origin.idle[0]), what="the provider's close")
        assert call(p.url) == Reply(200, evidence={"id": "x_1"})
    assert p.connections == 2
    assert len(p.requests) == 2  # each request went once


def test_a_refused_connection_was_not_sent() -> None:
    port = socket.create_server(("127.0.0.1", 0))
    number = port.getsockname()[1]
    port.close()  # nothing listens there now
    seen = call(f"http://127.0.0.1:{number}")
    assert isinstance(seen, NotSent) and seen.error_class == "ConnectionRefusedError"


def test_an_answer_that_never_comes_is_interrupted_not_failed() -> None:
    gone = threading.Event()

    def silent(conn: socket.socket, p: Provider) -> None:
        p.read_request(conn)
        gone.wait(10)

    with provider(silent) as p:
        seen = call(p.url, timeout=0.2)
        gone.set()
    assert isinstance(seen, Interrupted) and seen.error_class == "ReadTimeout"
    assert len(p.requests) == 1  # it arrived: the provider may have acted


def test_a_close_after_the_request_is_interrupted() -> None:
    def hang_up(conn: socket.socket, p: Provider) -> None:
        p.read_request(conn)

    with provider(hang_up) as p:
        seen = call(p.url)
    assert isinstance(seen, Interrupted)
    assert len(p.requests) == 1


def test_an_answer_that_is_not_http_is_interrupted() -> None:
    with provider(answering(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")) as p:
        seen = call(p.url)
    assert isinstance(seen, Interrupted) and seen.error_class == "ProtocolError"


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'5;ext=1\r\n{"id"\r\n8\r\n: "x_1"}\r\n0\r\nTrailer: t\r\n\r\n',
        b"HTTP/1.1 100 Continue\r\n\r\n" + OK,
        b'HTTP/1.0 200 OK\r\n\r\n{"id": "x_1"}',  # read to the close
    ],
    ids=["chunked", "after-a-100", "to-the-close"],
)
def test_every_way_an_answer_ends_is_read(answer: bytes) -> None:
    def once(conn: socket.socket, p: Provider) -> None:
        p.read_request(conn)
        conn.sendall(answer)
        if answer.startswith(b"HTTP/1.0"):
            conn.shutdown(socket.SHUT_WR)
        p.read_request(conn)

    with provider(once) as p:
        assert call(p.url) == Reply(200, evidence={"id": "x_1"})


def test_a_redirect_is_the_answer_and_is_not_followed() -> None:
    moved = b"HTTP/1.1 302 Found\r\nLocation: http://elsewhere/\r\nContent-Length: 0\r\n\r\n"
    with provider(answering(moved)) as p:
        seen = call(p.url)
    assert isinstance(seen, Reply) and seen.status == 302
    assert len(p.requests) == 1


def test_a_header_that_would_split_the_request_is_never_sent() -> None:
    with provider(answering(OK)) as p:
        seen = call(p.url, headers={"X-Note": "a\r\nX-Injected: 1"})
        assert isinstance(seen, NotSent) and seen.error_class == "InvalidHeader"
    assert p.requests == []


@pytest.fixture
def tls(tmp_path: Path) -> tuple[ssl.SSLContext, Path, Path]:
    """A server's TLS context for 127.0.0.1, the CA that signed it, and another CA."""
    ca, other = trustme.CA(), trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    other.cert_pem.write_to_path(str(tmp_path / "other.pem"))
    return context, tmp_path / "ca.pem", tmp_path / "other.pem"


def test_https_is_verified_and_kept_alive(
    tls: tuple[ssl.SSLContext, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    context, ca, _ = tls
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca))
    with provider(answering(OK, OK), context) as p:
        assert [call(p.url), call(p.url)] == [Reply(200, evidence={"id": "x_1"})] * 2
    assert p.connections == 1


def test_a_certificate_that_does_not_verify_was_not_sent(
    tls: tuple[ssl.SSLContext, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    context, _, other = tls
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(other))
    with provider(answering(OK), context) as p:
        seen = call(p.url)
    assert isinstance(seen, NotSent) and seen.error_class == "SSLCertVerificationError"
    assert p.requests == []
