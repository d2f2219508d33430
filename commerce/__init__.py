"""agentops' shipped task kinds — renewals, trips, reminders — and their tools (Stripe
payments, a mail API, a bookings API), playbooks, sandbox providers, the customer's payment
page and the Stripe webhook: an app like any user's, built only on ``agentops.effects``
(its declarations are in ``commerce/effects.py``). Nothing in the core imports it."""
