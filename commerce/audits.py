"""How the shipped kinds' providers list their effects for agentops' provider audit
(``agentops.effects.Audit``): Stripe's PaymentIntents and Refunds carrying
``metadata[agentops_key]``, the mail API's messages with our ``Message-ID``, the bookings API's
holds and bookings with our reference — each by its created window, every page.

agentops matches what is listed here against the journal, by key; these classes only list.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from agentops.effects import Audit, ProviderEffect, Reply, http_call, is_our_key
from commerce.tools.bookings import BookHotel, Booking, HoldFlight
from commerce.tools.email import SendEmail
from commerce.tools.payments import KEY_FIELD, stripe_client

PAGE = 100
# More pages than this in one window is more than one audit should read at once: it says so
# (and finds nothing missing) rather than judge from part of the list.
MAX_PAGES = 500
# A list request waits this long (an audit is not in a hurry, and no lease waits on it).
LIST_TIMEOUT_SECONDS = 30.0
MESSAGE_ID = re.compile(r"^<(?P<key>.+)@agentops>$")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _at(seconds: Any) -> datetime | None:
    return datetime.fromtimestamp(float(seconds), tz=UTC) if seconds is not None else None


def _window(since: datetime, until: datetime) -> dict[str, int]:
    return {"gte": int(since.timestamp()), "lte": int(until.timestamp()) + 1}


def _pages(fetch: Callable[[str | None], tuple[list[Any], bool]]) -> Iterator[Any]:
    """Every object of a list, a page at a time (``starting_after`` the last one's id)."""
    after = None
    for _ in range(MAX_PAGES):
        data, more = fetch(after)
        yield from data
        if not more or not data:
            return
        last = data[-1]
        after = str(last["id"] if isinstance(last, Mapping) else last.id)
    raise LookupError(f"more than {MAX_PAGES} pages in the window: audit a shorter one")


def sandbox_boot(base: str) -> tuple[str, str] | None:
    """Who answers at ``base``: a sandbox (always on this machine's loopback) says which run
    it is (``/_sandbox/health``). A real provider has no such page and is never asked: then
    nothing can be told."""
    if urlsplit(base).hostname not in LOOPBACK:
        return None
    seen = http_call("GET", base.rstrip("/") + "/_sandbox/health", key=None, timeout=2.0)
    if not isinstance(seen, Reply) or seen.status != 200:
        return None
    boot = seen.evidence.get("boot_id")
    return (base.rstrip("/"), str(boot)) if isinstance(boot, str) and boot else None


# --- Stripe ---------------------------------------------------------------------------------


def _charge(
    intent: Mapping[str, Any],
    charge: Any = None,
    refunds: Callable[[str], list[dict[str, Any]]] | None = None,
) -> ProviderEffect | None:
    """A succeeded PaymentIntent carrying our key, as an effect; refunded if its charge says so
    (``amount_refunded``: whoever refunded it, here or in the dashboard), with each refund of
    it (``refunds``: its succeeded refunds, by the payment's id), so each is a finding of its
    own and its customer told of each once."""
    key = (intent.get("metadata") or {}).get(KEY_FIELD)
    if not key or intent.get("status") != "succeeded":
        return None  # not ours, or no payment happened (declined, still processing)
    charge = charge if isinstance(charge, Mapping) else intent.get("latest_charge")
    refunded = int(charge.get("amount_refunded") or 0) if isinstance(charge, Mapping) else 0
    currency = intent.get("currency")
    undos = refunds(str(intent["id"])) if refunds is not None and refunded else []
    return ProviderEffect(
        provider_id=str(intent["id"]),
        key=str(key),
        tool="charge_customer",
        amount=intent.get("amount"),
        currency=currency,
        recipient=intent.get("customer"),
        offset=f"refunded {refunded} {currency}" if refunded else "",
        undone_by=tuple(str(r["id"]) for r in undos),
        created=_at(intent.get("created")),
        # What a person needs to see, never the client_secret.
        raw={
            "id": intent.get("id"),
            "object": "payment_intent",
            "amount": intent.get("amount"),
            "currency": currency,
            "status": intent.get("status"),
            "customer": intent.get("customer"),
            "description": intent.get("description"),
            "metadata": dict(intent.get("metadata") or {}),
            "created": intent.get("created"),
            "latest_charge": charge.get("id") if isinstance(charge, Mapping) else charge,
            "amount_refunded": refunded,
            "refunds": undos,
        },
    )


class StripeAudit(Audit):
    """PaymentIntents and Refunds carrying ``metadata[agentops_key]``, by their created window;
    and the payment each refund in the window refunded, ours or made in the dashboard, so a
    payment of last week refunded today shows as refunded."""

    provider = "stripe"
    tools = ("charge_customer", "refund_charge")

    def effects(self, since: datetime, until: datetime) -> Iterator[ProviderEffect]:
        client = stripe_client(timeout=LIST_TIMEOUT_SECONDS)
        window = _window(since, until)

        def intents(after: str | None) -> tuple[list[Any], bool]:
            params: dict[str, Any] = {
                "created": window,
                "limit": PAGE,
                "expand": ["data.latest_charge"],
            }
            if after:
                params["starting_after"] = after
            page = client.v1.payment_intents.list(params=params)  # type: ignore[arg-type]
            return [o.to_dict() for o in page.data], bool(page.has_more)

        def refunds(after: str | None) -> tuple[list[Any], bool]:
            params: dict[str, Any] = {
                "created": window,
                "limit": PAGE,
                "expand": ["data.payment_intent", "data.charge"],
            }
            if after:
                params["starting_after"] = after
            page = client.v1.refunds.list(params=params)  # type: ignore[arg-type]
            return [o.to_dict() for o in page.data], bool(page.has_more)

        of_intent: dict[str, list[dict[str, Any]]] = {}

        def refunds_of(intent_id: str) -> list[dict[str, Any]]:
            """Every succeeded refund of a refunded payment, oldest first, whenever made
            (asked once per payment and audit: refunds are few)."""
            if intent_id not in of_intent:

                def page(after: str | None) -> tuple[list[Any], bool]:
                    params: dict[str, Any] = {"payment_intent": intent_id, "limit": PAGE}
                    if after:
                        params["starting_after"] = after
                    got = client.v1.refunds.list(params=params)  # type: ignore[arg-type]
                    return [o.to_dict() for o in got.data], bool(got.has_more)

                of_intent[intent_id] = sorted(
                    (
                        {"id": str(r["id"]), "amount": r.get("amount"), "created": r.get("created")}
                        for r in _pages(page)
                        if r.get("status") == "succeeded"
                    ),
                    key=lambda r: (r["created"] or 0, r["id"]),
                )
            return of_intent[intent_id]

        for intent in _pages(intents):
            effect = _charge(intent, refunds=refunds_of)
            if effect is not None:
                yield effect
        for refund in _pages(refunds):
            if refund.get("status") != "succeeded":
                continue  # pending or failed: nothing refunded (yet); a later audit sees it
            intent = refund.get("payment_intent")
            key = (refund.get("metadata") or {}).get(KEY_FIELD)
            if key:
                yield ProviderEffect(
                    provider_id=str(refund["id"]),
                    key=str(key),
                    tool="refund_charge",
                    amount=refund.get("amount"),
                    currency=refund.get("currency"),
                    created=_at(refund.get("created")),
                    raw={
                        name: refund.get(name)
                        for name in ("id", "object", "amount", "currency", "status", "created")
                    }
                    | {
                        "payment_intent": intent.get("id")
                        if isinstance(intent, Mapping)
                        else intent,
                        "metadata": dict(refund.get("metadata") or {}),
                    },
                )
            if isinstance(intent, Mapping):
                # The payment this refund undid, with each of its refunds (this one among them).
                refunded = _charge(intent, refund.get("charge"), refunds=refunds_of)
                if refunded is not None:
                    yield refunded

    def expected(
        self, tool: str, args: Mapping[str, Any], evidence: Mapping[str, Any]
    ) -> dict[str, Any]:
        if tool == "charge_customer":
            return {
                "amount": args.get("amount"),
                "currency": args.get("currency"),
                "recipient": args.get("customer"),
            }
        if tool == "refund_charge":
            return {"amount": args.get("amount")}  # none given: the whole payment
        return {}

    def boot(self) -> tuple[str, str] | None:
        # Unset, it is the real Stripe, which cannot say.
        return sandbox_boot(str(settings.STRIPE_API_BASE or ""))


# --- Mail -------------------------------------------------------------------------------------


class MailAudit(Audit):
    """Messages whose ``Message-ID`` is one of ours (``<key@agentops>``), by created window."""

    provider = "mail"
    tools = ("send_email",)

    def effects(self, since: datetime, until: datetime) -> Iterator[ProviderEffect]:
        api = SendEmail()
        window = _window(since, until)

        def messages(after: str | None) -> tuple[list[Any], bool]:
            params: dict[str, Any] = {
                "created[gte]": window["gte"],
                "created[lte]": window["lte"],
                "limit": PAGE,
            }
            if after:
                params["starting_after"] = after
            page = api.fetch("/v1/messages", {}, **params)
            return list(page.get("data") or []), bool(page.get("has_more"))

        for message in _pages(messages):
            found = MESSAGE_ID.match(str(message.get("message_id") or ""))
            if found is None:
                continue  # not sent by agentops
            yield ProviderEffect(
                provider_id=str(message["id"]),
                key=found.group("key"),
                tool="send_email",
                recipient=message.get("to"),
                created=_at(message.get("created")),
                raw={
                    name: message.get(name)
                    for name in ("id", "message_id", "to", "subject", "status", "created")
                }
                | {"headers": dict(message.get("headers") or {})},
            )

    def expected(
        self, tool: str, args: Mapping[str, Any], evidence: Mapping[str, Any]
    ) -> dict[str, Any]:
        return {"recipient": args.get("to")}

    def boot(self) -> tuple[str, str] | None:
        return sandbox_boot(str(settings.MAIL_API_BASE or ""))


# --- Bookings ---------------------------------------------------------------------------------

# What each collection's effect is, who it is for, and which status says it was undone.
COLLECTIONS: tuple[tuple[type[Booking], str, str], ...] = (
    (HoldFlight, "passenger", "released"),
    (BookHotel, "guest", "cancelled"),
)


class BookingsAudit(Audit):
    """Flight holds and hotel bookings whose reference is one of our keys, by created window.
    A release or a cancellation carries no key of its own: it shows on what it undid."""

    provider = "bookings"
    tools = ("hold_flight", "book_hotel")

    def effects(self, since: datetime, until: datetime) -> Iterator[ProviderEffect]:
        window = _window(since, until)
        for tool_class, recipient, undone in COLLECTIONS:
            api = tool_class()

            def objects(after: str | None, api: Booking = api) -> tuple[list[Any], bool]:
                params: dict[str, Any] = {
                    "created[gte]": window["gte"],
                    "created[lte]": window["lte"],
                    "limit": PAGE,
                }
                if after:
                    params["starting_after"] = after
                page = api.fetch(f"/v1/{api.collection}", {}, **params)
                return list(page.get("data") or []), bool(page.get("has_more"))

            for obj in _pages(objects):
                reference = str(obj.get("reference") or "")
                if not is_our_key(reference):
                    continue
                status = obj.get("status")
                yield ProviderEffect(
                    provider_id=str(obj["id"]),
                    key=reference,
                    tool=api.name,
                    recipient=obj.get(recipient),
                    offset=undone if status == undone else "",
                    # A hold that expired ended on its own: nobody undid it.
                    lapsed=status == "expired",
                    created=_at(obj.get("created")),
                    raw=dict(obj),
                )

    def expected(
        self, tool: str, args: Mapping[str, Any], evidence: Mapping[str, Any]
    ) -> dict[str, Any]:
        if tool == "hold_flight":
            return {"recipient": args.get("passenger")}
        if tool == "book_hotel":
            return {"recipient": args.get("guest")}
        return {}

    def boot(self) -> tuple[str, str] | None:
        return sandbox_boot(str(settings.BOOKINGS_API_BASE or ""))


AUDITS: tuple[type[Audit], ...] = (StripeAudit, MailAudit, BookingsAudit)
