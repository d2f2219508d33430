"""A provider forgets what it made longer ago than its retention, so its memory is bounded by
what it was asked in that time (a demo left running for weeks): its objects, its ledger and
its idempotency keys go; what is newer stays, and so do the seeded records."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import stripe

from devtools.sandboxes import SandboxHandle, sandbox_spawn, sandboxes_ready, sandboxes_stop
from tests.sandbox.fixtures import stripe_client, unique, wait_for

# Objects' ``created`` is whole seconds, as Stripe's: one made at 12.9 s says 12, and goes a
# second early. A retention of a few seconds leaves room to see it held first.
RETAIN = 3.0


@pytest.fixture
def forgetful() -> Iterator[SandboxHandle]:
    handle = sandbox_spawn("payments", "--retain-seconds", str(RETAIN))
    try:
        sandboxes_ready(handle)
        handle.client.config(prune_every_seconds=0.05)
        yield handle
    finally:
        sandboxes_stop(handle)


def _charge(client: stripe.StripeClient, key: str) -> stripe.PaymentIntent:
    return client.v1.payment_intents.create(
        params={
            "amount": 4900,
            "currency": "eur",
            "payment_method": "pm_card_visa",
            "confirm": True,
            "metadata": {"agentops_key": key},
        },
        options={"idempotency_key": key},
    )


def test_what_is_older_than_the_retention_is_forgotten_and_what_is_newer_stays(
    forgetful: SandboxHandle,
) -> None:
    client = stripe_client(forgetful.url)
    forgetful.client.invoice(number="INV-KEPT", amount_due=4900, currency="eur")
    old_key = unique()
    old = _charge(client, old_key)
    health = forgetful.client.about()
    assert health["retain_seconds"] == RETAIN
    assert health["held"]["payment_intents"] == 1 and health["held"]["idempotency_keys"] == 1

    def forgotten() -> bool:
        # Each request may find the provider pruning first: asking is what moves it.
        held = forgetful.client.about()["held"]
        return bool(held["payment_intents"] == held["ledger"] == held["idempotency_keys"] == 0)

    wait_for(forgotten, timeout=10 * RETAIN + 5, what="the old payment forgotten")
    new_key = unique()
    new = _charge(client, new_key)
    held = forgetful.client.about()["held"]
    assert held["payment_intents"] == 1 and held["charges"] == 1
    with pytest.raises(stripe.InvalidRequestError):
        client.v1.payment_intents.retrieve(old.id)
    assert client.v1.payment_intents.retrieve(new.id).id == new.id
    assert forgetful.client.ledger(key=old_key) == []
    assert len(forgetful.client.ledger(key=new_key)) == 1
    # Its key went with it: the same request again is a new one, and makes a new payment.
    again = _charge(client, old_key)
    assert again.id != old.id
    # The system of record is not what it made: the seeded invoice is still there.
    found = client.v1.invoices.search(params={"query": "number:'INV-KEPT'"})
    assert [i.number for i in found.data] == ["INV-KEPT"]


def test_a_retention_that_is_not_positive_is_refused(forgetful: SandboxHandle) -> None:
    from sandbox.client import SandboxError

    with pytest.raises(SandboxError):
        forgetful.client.config(retain_seconds=0)
    assert forgetful.client.about()["retain_seconds"] == RETAIN
