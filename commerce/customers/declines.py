"""Why a card was declined, in words a customer understands.

The provider's codes (Stripe's ``decline_code``, or its error ``code`` when there is none)
are for us; a customer reads a sentence and what to do next. As Stripe advises, declines
that hint at fraud (``fraudulent``, ``lost_card``, ``stolen_card``, ``pickup_card``, …) are
told as the generic "your bank declined it": a thief learns nothing from the page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Decline:
    """A decline as the customer reads it: ``reason`` (what happened) and ``advice`` (what to
    do); ``same_card`` says whether trying the same card again can help."""

    reason: str
    advice: str
    same_card: bool = False


BANK_SAID_NO = Decline(
    "Your bank declined the payment without telling us why.",
    "Please pay with another card, or ask your bank to allow the payment.",
)
NOT_THROUGH = Decline(
    "The payment did not go through.",
    "Please pay with another card.",
)

_INSUFFICIENT = Decline(
    "Your card does not have enough funds for this payment.",
    "Please pay with another card.",
)
_EXPIRED = Decline(
    "Your card has expired.",
    "Please pay with a card that is still valid.",
)
_CVC = Decline(
    "The card's security code (the 3 or 4 digits on the back) was not correct.",
    "Please enter the card again, or pay with another card.",
)
_NUMBER = Decline(
    "The card number was not correct.",
    "Please enter the card again, or pay with another card.",
)
_PROCESSING = Decline(
    "Something went wrong at your bank while it processed the card.",
    "You can try the same card again in a few minutes, or pay with another card.",
    same_card=True,
)
_LIMIT = Decline(
    "Your card has reached its spending limit.",
    "Please pay with another card, or ask your bank to raise the limit.",
)
_CURRENCY = Decline(
    "Your card cannot pay in this currency.",
    "Please pay with another card.",
)
_AUTHENTICATION = Decline(
    "Your bank asked to confirm the payment, which this page cannot do.",
    "Please pay with another card.",
)

DECLINES: dict[str, Decline] = {
    "insufficient_funds": _INSUFFICIENT,
    "expired_card": _EXPIRED,
    "incorrect_cvc": _CVC,
    "invalid_cvc": _CVC,
    "incorrect_number": _NUMBER,
    "invalid_number": _NUMBER,
    "processing_error": _PROCESSING,
    "try_again_later": _PROCESSING,
    "reenter_transaction": _PROCESSING,
    "card_velocity_exceeded": _LIMIT,
    "withdrawal_count_limit_exceeded": _LIMIT,
    "currency_not_supported": _CURRENCY,
    "authentication_required": _AUTHENTICATION,
    # Told as the bank's refusal, whatever it hints at.
    **dict.fromkeys(
        (
            "generic_decline",
            "card_declined",
            "do_not_honor",
            "call_issuer",
            "card_not_supported",
            "transaction_not_allowed",
            "restricted_card",
            "not_permitted",
            "service_not_allowed",
            "pickup_card",
            "lost_card",
            "stolen_card",
            "fraudulent",
            "merchant_blacklist",
            "security_violation",
            "revocation_of_authorization",
            "no_action_taken",
        ),
        BANK_SAID_NO,
    ),
}


def decline_for(code: str | None) -> Decline:
    """The customer's words for the provider's ``code``; a code we do not know (or none)
    says only that the payment did not go through."""
    return DECLINES.get(code or "", NOT_THROUGH)


_CODE = re.compile(r"[a-z]+(?:_[a-z]+)+")


def decline_in(text: str) -> Decline:
    """The customer's words for the first provider code named in ``text`` (a step's detail:
    ``the provider refused it (HTTP 402 insufficient_funds): …``)."""
    for code in _CODE.findall(text or ""):
        if code in DECLINES:
            return DECLINES[code]
    return NOT_THROUGH
