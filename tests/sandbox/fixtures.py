"""Session-scoped fixtures that run the sandbox providers as real processes.

Registered for the whole suite by ``pytest_plugins`` in ``tests/conftest.py``, so any test
package can ask for ``payments_sandbox``, ``mail_sandbox`` or ``bookings_sandbox``. Tests
share one process per provider and stay apart by using unique keys and references; a test
that sets faults clears them (``clean_faults``). The processes are devtools.sandboxes'.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import stripe

from devtools.sandboxes import SandboxHandle as SandboxHandle  # the fixtures' type
from devtools.sandboxes import sandbox_start, sandboxes_stop

REPO = Path(__file__).resolve().parents[2]


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


def _sandbox(name: str, factory: pytest.TempPathFactory) -> Iterator[SandboxHandle]:
    handle = sandbox_start(name, output=factory.mktemp("sandboxes") / f"{name}.log")
    yield handle
    sandboxes_stop(handle)


@pytest.fixture(scope="session")
def payments_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxHandle]:
    yield from _sandbox("payments", tmp_path_factory)


@pytest.fixture(scope="session")
def mail_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxHandle]:
    yield from _sandbox("mail", tmp_path_factory)


@pytest.fixture(scope="session")
def bookings_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxHandle]:
    yield from _sandbox("bookings", tmp_path_factory)


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
