"""The cost of safety: two durable commits per effect step, and no chatter around them.

Counts statements, not seconds: speed lives in the benchmark; this guards the shape.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from journal.leases import lease_acquire
from journal.perform import step_perform
from journal.record import step_record, task_create
from tests.journal.support import ChargeTool, Provider, charge, invoice

pytestmark = pytest.mark.usefixtures("committed")


def _shape(sqls: list[str]) -> list[str]:
    return [s.split()[0].upper() for s in sqls]


def test_an_effect_step_costs_two_transactions_of_three_statements() -> None:
    task = task_create(kind="renewal", goal="charge")
    lease = lease_acquire(task_id=task.pk, owner="cost")
    assert lease is not None
    tool = ChargeTool(Provider())
    with CaptureQueriesContext(connection) as before:
        step = step_record(lease=lease, decision=charge(invoice()), tools={"charge": tool})
    with CaptureQueriesContext(connection) as after:
        step_perform(lease=lease, step=step, tool=tool)
    # Before the call: fence the lease, insert the step, insert its two entries; one commit.
    assert _shape([q["sql"] for q in before.captured_queries]) == [
        "BEGIN",
        "UPDATE",
        "INSERT",
        "INSERT",
        "COMMIT",
    ]
    # After: fence (which also reads the task's status: a running task needs no waking),
    # settle the step, insert the entries.
    assert _shape([q["sql"] for q in after.captured_queries]) == [
        "BEGIN",
        "UPDATE",
        "UPDATE",
        "INSERT",
        "COMMIT",
    ]
