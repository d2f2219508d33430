"""The real tools pointed at the sandbox providers: one place for the settings it takes."""

from __future__ import annotations

from typing import Any

import pytest

from tests.sandbox.fixtures import SandboxHandle


def sandbox_settings(
    payments: SandboxHandle, mail: SandboxHandle, bookings: SandboxHandle
) -> dict[str, Any]:
    """Pin the shared sandbox processes' configuration (other tests change it) and return
    the settings that send the tools there, for ``override_settings`` or a worker's env."""
    for handle in (payments, mail, bookings):
        handle.client.config(key_lifetime=86400)
    payments.client.config(search_lag=0, webhook_url=None)
    bookings.client.config(full_hotels=[], hold_expiry=900)
    return {
        "STRIPE_API_KEY": "sk_test_agentops",
        "STRIPE_API_BASE": payments.url,
        "STRIPE_KEY_LIFETIME_SECONDS": 86400,
        "STRIPE_SEARCH_LAG_SECONDS": 0,
        "STRIPE_MAX_NETWORK_RETRIES": 0,
        "MAIL_API_BASE": mail.url,
        "BOOKINGS_API_BASE": bookings.url,
    }


@pytest.fixture
def on_sandbox(
    payments_sandbox: SandboxHandle, mail_sandbox: SandboxHandle, bookings_sandbox: SandboxHandle
) -> dict[str, Any]:
    return sandbox_settings(payments_sandbox, mail_sandbox, bookings_sandbox)
