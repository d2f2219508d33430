"""Session-scoped fixtures that run the sandbox providers as real processes.

Registered for the whole suite by ``pytest_plugins`` in ``tests/conftest.py``, so any test
package can ask for ``payments_sandbox``, ``mail_sandbox`` or ``bookings_sandbox``. Tests
share one process per provider and stay apart by using unique keys and references; a test
that sets faults clears them (``clean_faults``).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import stripe

from sandbox.client import SandboxClient

REPO = Path(__file__).resolve().parents[2]
STARTUP_DEADLINE = 15.0


@dataclass
class SandboxHandle:
    name: str
    url: str
    port: int
    client: SandboxClient
    process: subprocess.Popen[bytes]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def unique(prefix: str = "k") -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def wait_for(condition, timeout: float = 5.0, interval: float = 0.02, what: str = "condition"):
    """Poll ``condition()`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def start_sandbox(module: str, *args: str) -> SandboxHandle:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", f"sandbox.{module}", "--port", str(port), *args],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    client = SandboxClient(url, timeout=2.0)
    deadline = time.monotonic() + STARTUP_DEADLINE
    while not client.health():
        if process.poll() is not None:
            raise RuntimeError(f"sandbox.{module} exited with {process.returncode}")
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"sandbox.{module} not ready after {STARTUP_DEADLINE}s")
        time.sleep(0.02)
    return SandboxHandle(module, url, port, client, process)


def stop_sandbox(handle: SandboxHandle) -> None:
    handle.process.terminate()
    try:
        handle.process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        handle.process.kill()
        handle.process.wait(timeout=5)


def stripe_client(url: str, timeout: float = 5.0) -> stripe.StripeClient:
    """The real ``stripe`` library pointed at a payments sandbox, no library retries."""
    return stripe.StripeClient(
        "sk_test_sandbox",
        base_addresses={"api": url},
        max_network_retries=0,
        http_client=stripe.RequestsClient(timeout=timeout),
    )


def error_of(exc_info: pytest.ExceptionInfo[stripe.StripeError]) -> Any:
    """The Stripe error object of a raised ``stripe`` exception (untyped, for asserts)."""
    return exc_info.value.error


def headers_of(exc_info: pytest.ExceptionInfo[stripe.StripeError]) -> dict[str, str]:
    return dict(exc_info.value.headers or {})


@pytest.fixture(scope="session")
def payments_sandbox() -> Iterator[SandboxHandle]:
    handle = start_sandbox("payments")
    yield handle
    stop_sandbox(handle)


@pytest.fixture(scope="session")
def mail_sandbox() -> Iterator[SandboxHandle]:
    handle = start_sandbox("mail")
    yield handle
    stop_sandbox(handle)


@pytest.fixture(scope="session")
def bookings_sandbox() -> Iterator[SandboxHandle]:
    handle = start_sandbox("bookings")
    yield handle
    stop_sandbox(handle)


@pytest.fixture
def clean_faults(
    payments_sandbox: SandboxHandle,
    mail_sandbox: SandboxHandle,
    bookings_sandbox: SandboxHandle,
) -> Iterator[None]:
    """Clear every provider's faults before and after the test."""
    handles = (payments_sandbox, mail_sandbox, bookings_sandbox)
    for h in handles:
        h.client.clear_faults()
    yield
    for h in handles:
        wait_for(h.client.health, what=f"{h.name} to be up")
        h.client.clear_faults()


@pytest.fixture
def stripe_sandbox(payments_sandbox: SandboxHandle) -> stripe.StripeClient:
    return stripe_client(payments_sandbox.url)


@dataclass
class HttpReply:
    status: int
    headers: dict[str, str]
    body: Any


def http_json(
    method: str,
    url: str,
    body: dict[str, Any] | None = None,
    *,
    key: str | None = None,
    timeout: float = 5.0,
) -> HttpReply:
    """One JSON request with the stdlib (mail and bookings speak JSON)."""
    import json
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
            return HttpReply(resp.status, dict(resp.headers.items()), json.loads(resp.read()))
    except urllib.error.HTTPError as exc:
        return HttpReply(exc.code, dict(exc.headers.items()), json.loads(exc.read()))
