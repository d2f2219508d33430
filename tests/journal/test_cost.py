"""The cost of safety: one durable commit per effect step in a run, and nothing around it.

An effect step's record and its settlement are each one statement; the runner sends a
step's settlement with the next step's record (journal_record's p_settles), so a run of steps
costs one statement, one round trip and one commit per step, the first record and the last
settlement (with the finish) aside.

Counts statements, not seconds: speed lives in the benchmark (`manage.py bench`); this guards
the shape, so an added query fails here before it shows there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from devtools.bench.core_path import POLICY, TOOLS, Countdown, NoopTool
from journal.leases import lease_acquire
from journal.perform import step_perform
from journal.record import step_record, task_create
from journal.run import task_advance
from tests.journal.support import ChargeTool, Provider, charge, invoice

pytestmark = pytest.mark.usefixtures("committed")


def test_an_effect_step_is_two_statements_each_its_own_commit() -> None:
    task = task_create(kind="renewal", goal="charge")
    lease = lease_acquire(task_id=task.pk, owner="cost")
    assert lease is not None
    tool = ChargeTool(Provider())
    with CaptureQueriesContext(connection) as before:
        step = step_record(lease=lease, decision=charge(invoice()), tools={"charge": tool})
    with CaptureQueriesContext(connection) as after:
        step_perform(lease=lease, step=step, tool=tool)
    # Before the call: journal_record fences the lease, numbers the step, inserts it and its
    # one entry. After it: journal_settle fences, settles the step, writes its one entry.
    # Each is one statement in autocommit: one round trip, one durable commit.
    assert [q["sql"].split("(")[0] for q in before.captured_queries] == [
        "SELECT * FROM journal_record"
    ]
    assert [q["sql"].split("(")[0] for q in after.captured_queries] == [
        "SELECT * FROM journal_settle"
    ]


class Counter:
    """Counts every statement the connection sends (no log, no limit)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        self.count += 1
        return execute(sql, *args)


def test_a_step_costs_the_same_at_the_end_of_a_long_task_as_at_its_start() -> None:
    task = task_create(kind="bench", goal="long")
    counter = Counter()
    planner = Countdown(200)
    marks: list[int] = []
    decide = planner.decide

    def noting(facts: Any) -> Any:
        marks.append(counter.count)
        return decide(facts)

    planner.decide = noting  # type: ignore[method-assign]
    with connection.execute_wrapper(counter):
        result = task_advance(task_id=task.pk, planner=planner, tools=TOOLS, policy=POLICY)
    assert result.stopped == "finished"
    per_step = [b - a for a, b in zip(marks, marks[1:], strict=False)]
    # The last step's settlement and this one's record, and not a read more: the runner keeps
    # the task's facts itself.
    assert per_step[1] == per_step[-1] == 1, per_step[:3] + per_step[-3:]


def _server_counters() -> Any:
    from devtools.bench.server import ServerCounters
    from tests.databases import owner_connection

    counters = ServerCounters(owner_connection(), role=connection.settings_dict["USER"])
    why_not = counters.available()
    assert why_not is None, why_not  # run by `make test`: its PostgreSQL has them
    return counters


@pytest.mark.parametrize("steps", [200])
def test_the_server_counts_one_round_trip_and_one_commit_per_step_and_hot_settlements(
    steps: int,
) -> None:
    """From the server's own counters (pg_stat_statements, the WAL): a BEGIN/COMMIT pair, a
    read or a write added to the hot path shows here, whatever Django's log sees."""
    counters = _server_counters()
    task = task_create(kind="bench", goal="long, counted by the server")
    planner = Countdown(steps)
    marks: list[Any] = []
    decide = planner.decide

    def noting(facts: Any) -> Any:
        marks.append(counters.mark())
        return decide(facts)

    planner.decide = noting  # type: ignore[method-assign]
    result = task_advance(task_id=task.pk, planner=planner, tools=TOOLS, policy=POLICY)
    assert result.stopped == "finished"
    early = counters.between(marks[1], marks[2])  # step 2: recorded, called, settled
    late = counters.between(marks[-2], marks[-1])  # the last step
    assert (early.statements, early.commits) == (1, 1), early
    assert (late.statements, late.commits) == (1, 1), late
    # Settling a step changes no indexed column (journal migration 0012) and its page keeps
    # room for the settled row: every settlement is a HOT update, writing no index entry.
    # (Between the first decision and the last, steps - 1 settlements: the last one goes
    # with the finish.)
    whole = counters.between(marks[0], marks[-1])
    assert whole.step_updates == steps - 1, whole
    assert whole.step_hot_updates == steps - 1, whole


def test_the_steps_statements_are_prepared_on_the_server() -> None:
    """Parsed and planned once per connection (journal/db.py), as the server lists them."""
    connection.close()  # a new session: nothing prepared yet
    task = task_create(kind="bench", goal="prepared")
    result = task_advance(task_id=task.pk, planner=Countdown(3), tools=TOOLS, policy=POLICY)
    assert result.stopped == "finished"
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE from_sql IS false")
        prepared = " ".join(row[0] for row in cursor.fetchall())
    for function in ("journal_lease_take", "journal_record", "journal_finish"):
        assert function in prepared, function


def test_each_statement_has_a_cursor_kept_on_its_connection() -> None:
    """The journal's statements each have a psycopg cursor of their own, kept with the
    connection (journal/db.py: a kept cursor keeps what it made of its result's columns while
    it runs the same text); a new connection has its own, and one that watches the
    connection (as a query count does) gets Django's wrapper."""
    from journal.db import prepared_cursor

    def statement(sql: str = "SELECT %s::int") -> Any:
        with prepared_cursor() as cursor:
            cursor.execute(sql, [7])
            assert cursor.fetchone() == (7,)
        return getattr(cursor, "raw", cursor)

    first = statement()
    assert statement() is first
    other = statement("SELECT %s::bigint")
    assert other is not first
    assert statement() is first and statement("SELECT %s::bigint") is other
    old = connection.connection
    connection.close()
    again = statement()
    assert again is not first and again.connection is not old
    assert statement() is again
    with CaptureQueriesContext(connection) as seen:
        watched = statement()
    assert watched is not again and len(seen) == 1
    assert statement() is again


class OncePerInvoice(NoopTool):
    """The no-op tool acting on a business object of its own each call, once per object: a
    step that takes the guards' claims and gives the live one back, as a charge does."""

    def guard(self, args: Any) -> str | None:
        return f"invoice:INV-{args['i']}"

    def once(self, args: Any) -> bool:
        return True


# What PostgreSQL runs inside the one statement a step sends (journal_record, carrying the last
# step's settlement), counted by the server: the lease check (journal_hold); the settlement,
# its claims given back and its entry; the record, its claims and its entry.
# A read of the task added (as the settlement and the record each made before they were told
# what the fence took), a rule's query asked when it cannot fail, or a claim in two statements
# (docs/design.md §14) shows here.
STATEMENTS_INSIDE_A_STEP = 11


@pytest.mark.parametrize("steps", [200])
def test_the_server_runs_the_same_few_statements_inside_each_step(steps: int) -> None:
    counters = _server_counters()
    task = task_create(kind="bench", goal="long, once per invoice")
    planner = Countdown(steps)
    marks: list[Any] = []
    decide = planner.decide

    def noting(facts: Any) -> Any:
        marks.append(counters.mark())
        return decide(facts)

    planner.decide = noting  # type: ignore[method-assign]
    result = task_advance(
        task_id=task.pk, planner=planner, tools={"noop": OncePerInvoice()}, policy=POLICY
    )
    assert result.stopped == "finished"
    early = counters.between(marks[1], marks[2])
    late = counters.between(marks[-2], marks[-1])
    assert early.statements == late.statements == 1
    assert early.nested == late.nested == STATEMENTS_INSIDE_A_STEP, (early, late)
