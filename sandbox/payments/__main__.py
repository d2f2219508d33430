"""``python -m sandbox.payments``: serve the payments sandbox.

Run: ``SANDBOX_WEBHOOK_SECRET=whsec_... python -m sandbox.payments --port PORT
[--key-lifetime S] [--search-lag S] [--webhook-url URL] [--invoice NUMBER:AMOUNT:CURRENCY:EMAIL]``.
"""

from __future__ import annotations

import os

from sandbox.payments.invoices import invoice_add
from sandbox.payments.provider import Payments
from sandbox.server import base_arg_parser, serve

# The webhook signing secret comes from this environment variable (or POST /_sandbox/config).
WEBHOOK_SECRET_VARIABLE = "SANDBOX_WEBHOOK_SECRET"  # noqa: S105 - a name, not a secret


def main() -> None:
    parser = base_arg_parser("python -m sandbox.payments")
    parser.add_argument("--search-lag", type=float, default=0.0, help="search trails writes, s")
    parser.add_argument("--webhook-url", default=None)
    parser.add_argument(
        "--invoice",
        action="append",
        default=[],
        metavar="NUMBER:AMOUNT:CURRENCY:EMAIL",
        help="an open invoice in the record from the start (repeatable; amount in minor units)",
    )
    args = parser.parse_args()
    provider = Payments(
        key_lifetime=args.key_lifetime,
        search_lag=args.search_lag,
        webhook_url=args.webhook_url,
        # From the environment, never the command line (which every local user can read).
        webhook_secret=os.environ.get(WEBHOOK_SECRET_VARIABLE) or None,
    )
    for spec in args.invoice:
        number, amount, currency, email = spec.split(":", 3)
        invoice_add(
            provider,
            {"number": number, "amount_due": amount, "currency": currency, "customer_email": email},
        )
    serve(provider, args.port, retain_seconds=args.retain_seconds)


if __name__ == "__main__":
    main()
