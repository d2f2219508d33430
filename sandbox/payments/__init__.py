"""A Stripe-compatible payments sandbox: the subset of the v1 REST API that the official
``stripe`` library uses for PaymentIntents, Refunds and webhooks.

Run: ``SANDBOX_WEBHOOK_SECRET=whsec_... python -m sandbox.payments --port PORT
[--key-lifetime S] [--search-lag S] [--webhook-url URL]`` (``__main__.py``).

``provider`` holds the objects, settings and routes; ``intents``, ``refunds`` (and charges)
and ``events`` (and webhooks) the handlers of each resource; ``params`` what they share.
"""
