"""The tasks ``make run`` starts for the demo (``manage.py demo_seed``, through
``effects.register_demo``): two renewals (one declined), two trips (one above the approval
threshold) and a batch of reminders. The summary links the customer's page of the declined
renewal and of the paid one."""

from __future__ import annotations

from agentops.effects import DemoTask

DEMO_TASKS = (
    DemoTask(
        kind="renewal",
        goal="renew Grace's subscription (her card is declined)",
        refs={
            "invoice": "INV-2292",
            "amount": 4900,
            "email": "grace@example.com",
            "payment_method": "pm_card_chargeDeclined",
        },
        name="INV-2292",
        shows="declined: pay with another card",
    ),
    DemoTask(
        kind="renewal",
        goal="renew Ada's subscription: charge INV-2291, email the receipt",
        refs={"invoice": "INV-2291", "amount": 4900, "email": "ada@example.com"},
        name="INV-2291",
        shows="paid",
    ),
    DemoTask(
        kind="trip",
        goal="book Alan's trip to Lisbon",
        refs={
            "invoice": "TRIP-7",
            "amount": 84000,
            "email": "alan@example.com",
            "flight": "TP1351",
            "traveller": "Alan Turing",
            "hotel": "Alfama",
            "check_in": "2027-03-01",
            "check_out": "2027-03-04",
        },
    ),
    DemoTask(
        kind="trip",
        goal="book Ada's conference trip (above 3,000.00: the charge waits for an operator)",
        refs={
            "invoice": "TRIP-8",
            "amount": 420000,
            "email": "ada@example.com",
            "flight": "BA492",
            "traveller": "Ada Lovelace",
            "hotel": "Chiado",
            "check_in": "2027-04-12",
            "check_out": "2027-04-16",
        },
    ),
    DemoTask(
        kind="reminders",
        goal="remind two customers of overdue invoices",
        refs={
            "invoices": [
                {"invoice": "INV-2101", "email": "edsger@example.com"},
                {"invoice": "INV-2102", "email": "barbara@example.com"},
            ]
        },
    ),
)
