"""The shipped tools: payments through Stripe, customer email, flight holds and hotels."""
