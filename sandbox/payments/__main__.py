"""``python -m sandbox.payments``: serve the payments sandbox.

Run: ``SANDBOX_WEBHOOK_SECRET=whsec_... python -m sandbox.payments --port PORT
[--key-lifetime S] [--search-lag S] [--webhook-url URL]``.
"""

from __future__ import annotations

import os

from sandbox.payments.provider import Payments
from sandbox.server import base_arg_parser, serve

# The webhook signing secret comes from this environment variable (or POST /_sandbox/config).
WEBHOOK_SECRET_VARIABLE = "SANDBOX_WEBHOOK_SECRET"  # noqa: S105 - a name, not a secret


def main() -> None:
    parser = base_arg_parser("python -m sandbox.payments")
    parser.add_argument("--search-lag", type=float, default=0.0, help="search trails writes, s")
    parser.add_argument("--webhook-url", default=None)
    args = parser.parse_args()
    provider = Payments(
        key_lifetime=args.key_lifetime,
        search_lag=args.search_lag,
        webhook_url=args.webhook_url,
        # From the environment, never the command line (which every local user can read).
        webhook_secret=os.environ.get(WEBHOOK_SECRET_VARIABLE) or None,
    )
    serve(provider, args.port)


if __name__ == "__main__":
    main()
