"""Amounts as people read them. Amounts travel in the currency's smallest unit, as Stripe's
do (420000 usd is 4,200.00 USD; 5000 jpy is 5,000 JPY); sentences shown to a person say both
when a model must act on the number."""

from __future__ import annotations

# Stripe's zero-decimal currencies: the smallest unit is the unit.
ZERO_DECIMAL = frozenset(
    [
        "bif",
        "clp",
        "djf",
        "gnf",
        "jpy",
        "kmf",
        "krw",
        "mga",
        "pyg",
        "rwf",
        "ugx",
        "vnd",
        "vuv",
        "xaf",
        "xof",
        "xpf",
    ]
)


def money_text(amount: int, currency: str) -> str:
    """``money_text(420000, "usd") == "4,200.00 USD"``."""
    code = currency.upper()
    if currency.lower() in ZERO_DECIMAL:
        return f"{amount:,} {code}"
    return f"{amount / 100:,.2f} {code}"
