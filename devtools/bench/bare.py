"""The production path with its rule triggers and its telemetry read-back set aside: what those
cost a step, measured in the same rounds as the path users get.

No product runs like this. The part answers one question the targets raise: how much of the
distance from the path users get to the floor and to the peer is those two, and how much is
the rest of the path. While it runs, and only then:

- **the journal's rule triggers** are off on its tasks, steps and entries: a task's and a
  step's rules and state machine, what is frozen once written, an entry's task and step
  (docs/design.md §14: they hold for every writer, the owner included), and with them the
  refusals of a delete or of an update of what is written, which the path never makes. The
  claims stay on (``journal_step_claims_*``): they are the guard and once-per-object, which
  the design holds in the database, and part of the work a step's record and settlement do;
- **the run's telemetry is not read back** (agentops.runner's ``run_observed``): no line a
  step event, no counters.

Everything else is the production path's: the same function, kind, schema check, bindings,
money cap, guard, lease, planner and HTTP call. The triggers are switched by the owner, for
every session at once, so the part runs only against a database holding nothing but the
benchmark's tasks (devtools.management.commands.bench), and they are switched back however
the part ends (:func:`bare`); a part that was killed first leaves them off, which
:func:`check_on` finds before the next run measures anything. Switching them invalidates
every session's cached plans of those tables: each switch is followed by a task that is not
timed (:func:`bare` and its caller), so no part pays the planning the other caused.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql

# The journal's tables whose rules live in triggers, and the triggers that stay on.
TABLES = ("journal_task", "journal_step", "journal_entry")
KEPT_PREFIX = "journal_step_claims"
# pg_trigger.tgtype: a row trigger (not a statement one, such as the TRUNCATE refusals).
_ROW = 1
# What agentops.runner calls after a run to read its telemetry back.
OBSERVED = "run_observed"


class RulesLeftOff(RuntimeError):
    """A rule trigger of the journal is off: a bare part was killed before it switched them
    back. Nothing is measured until someone switches them on again."""


def rule_triggers(conn: psycopg.Connection[Any]) -> list[tuple[str, str, str]]:
    """The row triggers holding the journal's rules on ``TABLES`` (schema, table, trigger),
    read from the catalogue: every one but the claims. The tables are found as the app finds
    them (its search path)."""
    rows = conn.execute(
        """SELECT n.nspname, c.relname, t.tgname
             FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.oid = ANY(%s::regclass[]) AND NOT t.tgisinternal AND t.tgtype & %s <> 0
              AND NOT starts_with(t.tgname, %s)
            ORDER BY 2, 3""",
        [list(TABLES), _ROW, KEPT_PREFIX],
    ).fetchall()
    return [(schema, table, trigger) for schema, table, trigger in rows]


def check_on(conn: psycopg.Connection[Any]) -> None:
    """Raise :class:`RulesLeftOff` if any of the journal's triggers is off on a table or on
    any of its ranges."""
    off = conn.execute(
        """SELECT c.relname || '.' || t.tgname FROM pg_trigger t
             JOIN pg_class c ON c.oid = t.tgrelid
            WHERE NOT t.tgisinternal AND t.tgenabled = 'D'
              AND (c.oid = ANY(%(tables)s::regclass[]) OR c.oid IN (
                   SELECT i.inhrelid FROM pg_inherits i
                    WHERE i.inhparent = ANY(%(tables)s::regclass[])))
            ORDER BY 1 LIMIT 5""",
        {"tables": list(TABLES)},
    ).fetchall()
    if off:
        raise RulesLeftOff(
            "the journal's rules are off (" + ", ".join(name for (name,) in off) + "): a "
            "benchmark was killed mid-part; switch them on (ALTER TABLE … ENABLE TRIGGER) "
            "before measuring anything"
        )


def _switch(
    conn: psycopg.Connection[Any], triggers: list[tuple[str, str, str]], *, on: bool
) -> None:
    """Each trigger on (or off), on its table and, a partitioned table's, on each range."""
    verb = sql.SQL("ENABLE" if on else "DISABLE")
    for schema, table, trigger in triggers:
        conn.execute(
            sql.SQL("ALTER TABLE {} {} TRIGGER {}").format(
                sql.Identifier(schema, table), verb, sql.Identifier(trigger)
            )
        )


def _unobserved(**_: Any) -> None:
    """run_observed's stand-in: nothing read back, logged or counted."""


@contextlib.contextmanager
def bare(conn: psycopg.Connection[Any]) -> Iterator[list[tuple[str, str, str]]]:
    """Within: the rules' triggers off (``conn``: the owner's, in autocommit) and the run's
    telemetry not read back, in this process. Yields the triggers switched off. Both are
    back when it ends, however it ends (but a kill)."""
    import agentops.runner as runner

    check_on(conn)
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
