"""Payments through the official ``stripe`` library: ``charge_customer`` and ``refund_charge``.

The step's key is both the request's ``Idempotency-Key`` and ``metadata[agentops_key]`` on
the PaymentIntent (or Refund), so the effect can be found by search or list later. With
``STRIPE_API_BASE`` unset the client talks to the real Stripe; set it to the sandbox.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

import stripe
import urllib3
from django.conf import settings

from agentops.effects import (
    NO_CONTROL,
    Interrupted,
    Money,
    NotSent,
    Observation,
    Outcome,
    Reply,
    Tool,
    http_exchange,
    observe_exception,
)

KEY_FIELD = "agentops_key"
# How far back a list-based lookup scans when search has not caught up yet.
LIST_LOOKBACK = timedelta(hours=49)
LIST_MAX_PAGES = 5


class StripeTransport(stripe.HTTPClient):
    """The ``stripe`` library's requests, sent by agentops' own client (``http_exchange``:
    kept-alive connections, the environment's proxy and CA bundle, nothing retried): the
    library builds every request, reads every answer and retries as it is told to, as with
    its own transports, whose requests and http.client below it cost more than half of a
    charge's CPU. A failure is the library's ``APIConnectionError``, wrapping what the client
    saw (``observe_stripe`` tells from it whether anything was sent); the library may retry
    one that sent nothing, or timed out, as it retries with requests."""

    name = "agentops"

    def __init__(self, *, timeout: float) -> None:
        super().__init__()
        self._timeout = timeout

    def request(  # type: ignore[override]  # a body of bytes, as its requests transport's
        self,
        method: str,
        url: str,
        headers: Mapping[str, str] | None,
        post_data: Any = None,
        *,
        _usage: list[str] | None = None,
    ) -> tuple[bytes, int, Mapping[str, str]]:
        body = post_data.encode() if isinstance(post_data, str) else post_data
        try:
            got = http_exchange(
                method.upper(), url, body=body, headers=dict(headers or {}), timeout=self._timeout
            )
        except Exception as exc:  # what the client saw, for the library to wrap
            seen = observe_exception(exc)
            # As stripe's requests transport: a connection that failed or a timeout may be
            # tried again (under the same idempotency key), a certificate refused never.
            retry = isinstance(seen, NotSent) or isinstance(exc, _RETRIED)
            raise stripe.APIConnectionError(  # type: ignore[no-untyped-call]
                f"Unexpected error communicating with Stripe ({seen.error_class}: {seen.message})",
                should_retry=retry and seen.error_class != "SSLCertVerificationError",
            ) from exc
        return got.data, got.status, got.headers

    def request_stream(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("agentops reads no stream from Stripe")


_RETRIED = (
    TimeoutError,
    ConnectionError,
    urllib3.exceptions.TimeoutError,
    urllib3.exceptions.ProtocolError,
)


def stripe_client(*, timeout: float) -> stripe.StripeClient:
    base = {"api": settings.STRIPE_API_BASE} if settings.STRIPE_API_BASE else None
    return stripe.StripeClient(
        settings.STRIPE_API_KEY,
        base_addresses=base,  # type: ignore[arg-type]
        max_network_retries=settings.STRIPE_MAX_NETWORK_RETRIES,
        http_client=StripeTransport(timeout=timeout),
    )


class Budget:
    """One lookup's time, shared by all its requests (search, then list pages): a lookup
    takes at most its tool's timeout, so the runner's lease need only outlast that."""

    def __init__(self, seconds: float) -> None:
        self.ends = time.monotonic() + seconds

    def client(self) -> stripe.StripeClient:
        left = self.ends - time.monotonic()
        if left <= 0:
            raise LookupError("the lookup ran out of time before it could tell")
        return stripe_client(timeout=left)


def observe_stripe(exc: stripe.StripeError) -> Observation:
    """What a failed stripe call saw, for the journal to classify (docs/design.md §2)."""
    if isinstance(exc, stripe.APIConnectionError):
        seen = observe_exception(exc)
        if settings.STRIPE_MAX_NETWORK_RETRIES > 0 and not isinstance(seen, Interrupted):
            # The library may have retried: an earlier try of this call may have landed.
            return Interrupted(seen.error_class, seen.message)
        return seen
    error = exc.error
    code = (error.code if error else None) or (error.type if error else None) or ""
    if isinstance(exc, stripe.CardError) and error is not None:
        # Why the card was declined (insufficient_funds, expired_card, …), more than "declined":
        # the customer's page tells them in words (commerce/customers/declines.py).
        code = getattr(error, "decline_code", None) or code
    if isinstance(exc, stripe.IdempotencyError) and exc.http_status == 400:
        code = "idempotency_error"
    status = exc.http_status or 500
    return Reply(status, code=str(code), message=exc.user_message or str(exc)[:500])


CARD_BRAND = re.compile(r"[a-z_]{1,20}\Z")
LAST4 = re.compile(r"[0-9]{4}\Z")


def card_of(charge: Any) -> dict[str, str]:
    """The card a charge was paid with, for the receipt: its brand and last four digits
    (Stripe's ``payment_method_details.card``) and nothing else of it — the evidence stays
    small and safe to show. Empty when the answer does not say (the charge not expanded, an
    older webhook) or says something that is not a brand and four digits."""
    details = charge.get("payment_method_details") if isinstance(charge, Mapping) else None
    card = details.get("card") if isinstance(details, Mapping) else None
    if not isinstance(card, Mapping):
        return {}
    brand, last4 = card.get("brand"), card.get("last4")
    if not (isinstance(brand, str) and CARD_BRAND.match(brand)):
        return {}
    if not (isinstance(last4, str) and LAST4.match(last4)):
        return {}
    return {"card_brand": brand, "card_last4": last4}


def intent_outcome(intent: Mapping[str, Any]) -> Outcome:
    status = intent.get("status")
    charge = intent.get("latest_charge")
    evidence = {
        "payment_intent": intent.get("id"),
        # Expanded (the tool asks for it), the charge is an object: its id is kept.
        "charge": charge.get("id") if isinstance(charge, Mapping) else charge,
        "amount": intent.get("amount"),
        "currency": intent.get("currency"),
        "status": status,
        **(card_of(charge) if status == "succeeded" else {}),
    }
    if status == "succeeded":
        return Outcome.done(evidence, f"payment {intent.get('id')} succeeded")
    if status in ("requires_payment_method", "canceled"):
        error = intent.get("last_payment_error") or {}
        reason = error.get("decline_code") or error.get("code") or status
        return Outcome.not_done(
            f"payment {intent.get('id')} did not go through ({reason})",
            evidence=evidence,
            code=reason,
        )
    return Outcome.unknown(
        f"payment {intent.get('id')} is {status}; the provider has not finished", evidence=evidence
    )


def _find_by_key(objects: Iterable[Any], key: str) -> dict[str, Any] | None:
    """The object (as a plain dict: stripe 16's objects are not dicts) carrying our key."""
    for obj in objects:
        plain: dict[str, Any] = obj.to_dict()
        if (plain.get("metadata") or {}).get(KEY_FIELD) == key:
            return plain
    return None


class ChargeCustomer(Tool):
    name = "charge_customer"
    description = (
        "Charge a customer for an invoice, once. Amount in integer minor units (4900 = 49.00)."
    )
    schema = {
        "type": "object",
        "properties": {
            "invoice": {"type": "string", "minLength": 1, "maxLength": 100, **NO_CONTROL},
            "amount": {"type": "integer", "minimum": 1, "maximum": 100_000_000},
            "currency": {"type": "string", "pattern": "^[a-z]{3}$"},
            "payment_method": {"type": "string", "minLength": 1, "maxLength": 200},
            "customer": {"type": "string", "maxLength": 200},
            "description": {"type": "string", "maxLength": 500, **NO_CONTROL},
        },
        "required": ["invoice", "amount", "currency", "payment_method"],
        "additionalProperties": False,
    }
    # A succeeded PaymentIntent proves the payment; its charge id (latest_charge) is kept
    # when the answer has it, but older API versions' webhooks may not.
    evidence = ("payment_intent",)
    also_searchable = ("charge",)
    compensation = "refund_charge"
    money = Money(amount="amount", currency="currency")
    key_lifetime_setting = "STRIPE_KEY_LIFETIME_SECONDS"
    lookup_lag_setting = "STRIPE_SEARCH_LAG_SECONDS"

    def guard(self, args: Mapping[str, Any]) -> str | None:
        return f"charge:{args['invoice']}"

    def once(self, args: Mapping[str, Any]) -> bool:
        return True  # an invoice is paid once (again only after a full refund)

    def undo_args(self, args: Mapping[str, Any], evidence: Mapping[str, Any]) -> dict[str, Any]:
        return {"payment_intent": evidence["payment_intent"]}  # the whole payment

    @property
    def requests_per_call(self) -> int:
        # The library may retry a call; a lookup's requests share one timeout (Budget).
        return 1 + settings.STRIPE_MAX_NETWORK_RETRIES

    def call(self, args: Mapping[str, Any], *, key: str) -> Observation:
        params: dict[str, Any] = {
            "amount": args["amount"],
            "currency": args["currency"],
            "payment_method": args["payment_method"],
            "confirm": True,
            # Redirect-based methods would leave the intent waiting for a customer.
            "automatic_payment_methods": {"enabled": True, "allow_redirects": "never"},
            "metadata": {KEY_FIELD: key, "invoice": args["invoice"]},
            "description": args.get("description") or f"Invoice {args['invoice']}",
            # The charge, whole: the card's brand and last four digits, for the receipt.
            "expand": ["latest_charge"],
        }
        if args.get("customer"):
            params["customer"] = args["customer"]
        try:
            intent = stripe_client(timeout=self.timeout).v1.payment_intents.create(
                params=params,  # type: ignore[arg-type]
                options={"idempotency_key": key},
            )
        except stripe.StripeError as exc:
            return observe_stripe(exc)
        plain = intent.to_dict()
        if not plain.get("id") or not plain.get("status"):
            return Reply(200)  # a 200 that names no payment proves nothing: classify says so
        outcome = intent_outcome(plain)
        if outcome.state == "done":
            return Reply(200, evidence=outcome.data["evidence"])
        if outcome.state == "not_done":
            code = str(outcome.data.get("code") or "payment_failed")
            return Reply(402, code=code, message=outcome.detail)
        return Interrupted("PaymentNotFinished", outcome.detail)

    def lookup(self, args: Mapping[str, Any], *, key: str) -> Outcome | None:
        budget = Budget(self.timeout)
        found = budget.client().v1.payment_intents.search(
            params={
                "query": f"metadata['{KEY_FIELD}']:'{key}'",
                "limit": 10,
                "expand": ["data.latest_charge"],
            }
        )
        intent = _find_by_key(found.data, key)
        if intent is None:
            # Search trails writes; the list endpoint does not. Scan recent intents.
            intent = _scan(
                lambda after: budget.client().v1.payment_intents.list(params=_page(after)), key
            )
        return None if intent is None else intent_outcome(intent)


def _page(after: str | None) -> Any:
    params: dict[str, Any] = {
        "limit": 100,
        "created": {"gte": int(time.time() - LIST_LOOKBACK.total_seconds())},
        "expand": ["data.latest_charge"],
    }
    if after:
        params["starting_after"] = after
    return params


def _scan(fetch: Any, key: str) -> dict[str, Any] | None:
    after = None
    for _ in range(LIST_MAX_PAGES):
        page = fetch(after)
        found = _find_by_key(page.data, key)
        if found is not None or not page.has_more or not page.data:
            return found
        after = page.data[-1].id
    return None


class RefundCharge(Tool):
    name = "refund_charge"
    description = (
        "Refund a payment this task made, all of it (an amount, if given, must be the whole "
        "payment's, in integer minor units)."
    )
    schema = {
        "type": "object",
        "properties": {
            "payment_intent": {"type": "string", "pattern": "^pi_"},
            "amount": {"type": "integer", "minimum": 1},
            "reason": {"type": "string", "enum": ["duplicate", "requested_by_customer"]},
        },
        "required": ["payment_intent"],
        "additionalProperties": False,
    }

    evidence = ("refund",)
    key_lifetime_setting = "STRIPE_KEY_LIFETIME_SECONDS"

    def guard(self, args: Mapping[str, Any]) -> str | None:
        return f"refund:{args['payment_intent']}"

    def once(self, args: Mapping[str, Any]) -> bool:
        return True  # the harness refunds a payment whole, once

    @property
    def requests_per_call(self) -> int:
        return 1 + settings.STRIPE_MAX_NETWORK_RETRIES

    def call(self, args: Mapping[str, Any], *, key: str) -> Observation:
        params: dict[str, Any] = {
            "payment_intent": args["payment_intent"],
            "metadata": {KEY_FIELD: key},
        }
        for optional in ("amount", "reason"):
            if args.get(optional) is not None:
                params[optional] = args[optional]
        try:
            refund = stripe_client(timeout=self.timeout).v1.refunds.create(
                params=params,  # type: ignore[arg-type]
                options={"idempotency_key": key},
            )
        except stripe.StripeError as exc:
            return observe_stripe(exc)
        plain = refund.to_dict()
        if not plain.get("id") or not plain.get("status"):
            return Reply(200)  # a 200 that names no refund proves nothing: classify says so
        outcome = refund_outcome(plain)
        if outcome.state == "done":
            return Reply(200, evidence=outcome.data["evidence"])
        if outcome.state == "not_done":
            return Reply(402, code="refund_failed", message=outcome.detail)
        return Interrupted("RefundNotFinished", outcome.detail)

    def lookup(self, args: Mapping[str, Any], *, key: str) -> Outcome | None:
        budget = Budget(self.timeout)
        refund = _scan(
            lambda after: budget.client().v1.refunds.list(
                params={
                    "payment_intent": args["payment_intent"],
                    "limit": 100,
                    **({"starting_after": after} if after else {}),
                }
            ),
            key,
        )
        return None if refund is None else refund_outcome(refund)


def refund_outcome(refund: Mapping[str, Any]) -> Outcome:
    """A refund's status in three states, the same for its reply, its lookup and its webhook.

    ``pending`` (or ``requires_action``) is not done yet and may still fail: unknown, and
    looked up again until it settles.
    """
    status = refund.get("status")
    evidence = {
        "refund": refund.get("id"),
        "payment_intent": refund.get("payment_intent"),
        "amount": refund.get("amount"),
        "currency": refund.get("currency"),
        "status": status,
    }
    if status == "succeeded":
        return Outcome.done(evidence, f"refund {refund.get('id')} succeeded")
    if status in ("failed", "canceled"):
        reason = refund.get("failure_reason") or status
        return Outcome.not_done(
            f"refund {refund.get('id')} did not go through ({reason})", evidence=evidence
        )
    return Outcome.unknown(
        f"refund {refund.get('id')} is {status}; the provider has not finished",
        evidence=evidence,
    )
