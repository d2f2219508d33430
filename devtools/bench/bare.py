"""The production path with two of its guarantees set aside: what they cost, in the same rounds.

No product runs like this. The part answers one question the targets raise: how far the
path users get is from the floor and the peer because of what the journal checks, and how
far because of the work itself. While it runs, and only then:

- **the rules held in the journal's triggers** are off: a task's and a step's rules and
  state machine, what is frozen once written, an entry's task and step (docs/design.md §14:
  they hold for every writer, the owner included). The claims stay on
  (``journal_step_claims_*``): they are the guard and once-per-object, which the design
  holds in the database as a constraint, and the work a step's record and settlement do;
- **the run's telemetry is not read back** (agentops.telemetry.steps.run_observed): no line
  a step event, no counters.

Everything else is the production path's: the same function, kind, schema check, bindings,
money cap, guard, lease, planner and HTTP call. The triggers are switched by their owner,
for every session at once (the benchmark's database is a throwaway one), and switched back
whatever happens (:func:`bare`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg

# The journal's tables whose rules live in triggers, and the triggers that stay on.
TABLES = ("journal_task", "journal_step", "journal_entry")
KEPT_PREFIX = "journal_step_claims"
# pg_trigger.tgtype: a row trigger (not a statement one, such as the TRUNCATE refusals).
_ROW = 1
# What agentops.runner calls after a run to read its telemetry back.
OBSERVED = "run_observed"


def rule_triggers(conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    """The row triggers holding the journal's rules on ``TABLES`` (table, trigger), read from
    the catalogue: every one but the claims."""
    rows = conn.execute(
        """SELECT c.relname, t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
            WHERE c.relname = ANY(%s) AND NOT t.tgisinternal AND t.tgtype & %s <> 0
              AND NOT starts_with(t.tgname, %s)
            ORDER BY 1, 2""",
        [list(TABLES), _ROW, KEPT_PREFIX],
    ).fetchall()
    return [(table, trigger) for table, trigger in rows]


def _switch(conn: psycopg.Connection[Any], triggers: list[tuple[str, str]], *, on: bool) -> None:
    verb = "ENABLE" if on else "DISABLE"
    for table, trigger in triggers:
        # A partitioned table's trigger is switched on each of its ranges too.
        conn.execute(
            f'ALTER TABLE "{table}" {verb} TRIGGER "{trigger}"'
        )  # names from the catalogue


def _unobserved(**_: Any) -> None:
    """run_observed's stand-in: nothing read back, logged or counted."""


@contextlib.contextmanager
def bare(conn: psycopg.Connection[Any]) -> Iterator[list[tuple[str, str]]]:
    """Within: the rules' triggers off (``conn``: the owner's, in autocommit) and the run's
    telemetry not read back, in this process. Yields the triggers switched off. Both are
    back when it ends, however it ends."""
    import agentops.runner as runner

    triggers = rule_triggers(conn)
    names = vars(runner)  # the name the runner calls, bound when it imported it
    observed = names[OBSERVED]
    try:
        _switch(conn, triggers, on=False)
        names[OBSERVED] = _unobserved
        yield triggers
    finally:
        names[OBSERVED] = observed
        _switch(conn, triggers, on=True)
