"""Shared by the model adapters' tests: the sandbox providers, a fake model server, a renewal."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from journal.policy import Policy
from tests.agentops.planners.fakes import FakeModelServer, serve
from tests.sandbox.fixtures import SandboxHandle

AT_ONCE = Policy(lookup_schedule=(0.0, 0.0, 0.0))


@pytest.fixture
def fake_model() -> Iterator[FakeModelServer]:
    yield from serve()


@pytest.fixture
def providers(payments_sandbox: SandboxHandle, mail_sandbox: SandboxHandle) -> Iterator[None]:
    """The real tools, pointed at the sandbox providers (as tests/agentops/test_*_tool.py)."""
    payments_sandbox.client.config(key_lifetime=86400, search_lag=0, webhook_url=None)
    mail_sandbox.client.config(key_lifetime=86400)
    with override_settings(
        STRIPE_API_KEY="sk_test_agentops",
        STRIPE_API_BASE=payments_sandbox.url,
        STRIPE_KEY_LIFETIME_SECONDS=86400,
        STRIPE_SEARCH_LAG_SECONDS=0,
        STRIPE_MAX_NETWORK_RETRIES=0,
        MAIL_API_BASE=mail_sandbox.url,
        TOOL_TIMEOUT_SECONDS=2.0,
    ):
        yield


def charge_args(inv: str) -> dict[str, Any]:
    return {"invoice": inv, "amount": 4900, "currency": "usd", "payment_method": "pm_card_visa"}


def receipt_args(inv: str) -> dict[str, Any]:
    return {
        "to": "ada@example.com",
        "subject": f"Receipt for {inv}",
        "body": f"Thank you: we received your payment of 49.00 for {inv}.",
        "reference": inv,
    }


def renewal_goal(inv: str) -> tuple[str, dict[str, Any]]:
    goal = f"Renew the subscription: charge invoice {inv} and email the receipt."
    refs = {
        "invoice": inv,
        "amount": 4900,
        "currency": "usd",
        "payment_method": "pm_card_visa",
        "email": "ada@example.com",
    }
    return goal, refs
