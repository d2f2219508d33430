"""What a stretch of work cost, as the server counted it: never Django's query log.

Django's log sees the statements Django sends, and not BEGIN or COMMIT: a change that wrapped
the hot path in a transaction would add two round trips and show in no count taken there.
The server sees everything:

- **statements** (round trips: nothing here pipelines): ``pg_stat_statements``, every
  top-level statement each session sent, BEGIN and COMMIT included, for one role;
- **statements inside**: the statements PostgreSQL ran within those (the journal's functions
  and triggers), where the server tracks them (``pg_stat_statements.track = all``: the
  tests' server; the benchmark's tracks only what is sent, and counts none). The journal's
  functions run as the tables' owner (security definers), so what runs inside them is the
  owner's: counted for the role and the owner, inside statements only (the owner sends
  nothing else meanwhile but these counters' own reads, which are top-level);
- **commits**, **WAL bytes**, **updates and HOT updates**: read back from the WAL itself
  (``pg_walinspect``) between two positions: a commit is a COMMIT record of a transaction
  that wrote a journal table; an update of ``journal_step`` is HOT when its record says so.

The throwaway servers of ``scripts/stack.py test`` and ``bench`` load both, in the schema
``server_stats`` (devtools/stack/postgres.py); elsewhere :func:`available` says why not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SCHEMA = "server_stats"
JOURNAL_TABLES = ("journal_task", "journal_step", "journal_entry")


@dataclass(frozen=True)
class Mark:
    """A position: the WAL flushed so far, and the statements ``role`` had sent by then."""

    lsn: str
    statements: int
    nested: int = 0


@dataclass(frozen=True)
class Counts:
    statements: int
    commits: int
    wal_bytes: int
    nested: int
    step_updates: int
    step_hot_updates: int

    def per(self, steps: int) -> dict[str, float]:
        return {
            "statements": self.statements / steps,
            "commits": self.commits / steps,
            "wal_bytes": self.wal_bytes / steps,
        }


class ServerCounters:
    """Marks and what lay between them. ``connection`` is a Django connection of a role that
    may read the counters (the owner's, on the throwaway servers); ``role`` is the role whose
    statements are counted (the app's: the runner's connection)."""

    def __init__(self, connection: Any, *, role: str) -> None:
        self.connection = connection
        self.role = role

    def available(self) -> str | None:
        """None if the counters can be read here, else why not (a sentence)."""
        with self.connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_extension e JOIN pg_namespace n "
                "ON n.oid = e.extnamespace WHERE n.nspname = %s "
                "AND e.extname IN ('pg_stat_statements', 'pg_walinspect')",
                [SCHEMA],
            )
            if cursor.fetchone()[0] != 2:
                return (
                    f"pg_stat_statements and pg_walinspect are not installed in schema {SCHEMA} "
                    "of this database (scripts/stack.py's throwaway servers have them)"
                )
            try:
                cursor.execute(f"SELECT 1 FROM {SCHEMA}.pg_stat_statements LIMIT 1")  # noqa: S608
            except Exception as exc:  # not loaded: "must be loaded via shared_preload_libraries"
                return f"pg_stat_statements cannot be read here: {str(exc).strip()}"
        return None

    def mark(self) -> Mark:
        with self.connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_current_wal_flush_lsn()::text, "  # noqa: S608 - the schema is a constant
                "COALESCE(sum(s.calls) FILTER (WHERE s.toplevel AND s.userid = r.oid), 0)::bigint, "
                "COALESCE(sum(s.calls) FILTER (WHERE NOT s.toplevel), 0)::bigint "
                f"FROM {SCHEMA}.pg_stat_statements s, "
                "(SELECT oid FROM pg_roles WHERE rolname = %s) r "
                "WHERE s.userid IN (r.oid, (SELECT c.relowner FROM pg_class c "
                "                            WHERE c.oid = 'journal_task'::regclass)) "
                "AND s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
                [self.role],
            )
            lsn, statements, nested = cursor.fetchone()
        return Mark(lsn=str(lsn), statements=int(statements), nested=int(nested))

    def between(self, start: Mark, end: Mark) -> Counts:
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"""
                WITH blocks AS (
                    -- A partition's blocks count as its table's (journal migration 0015).
                    SELECT b.start_lsn, b.xid, b.record_type,
                           COALESCE(pg_partition_root(c.oid)::text, c.relname::text) AS relname
                      FROM {SCHEMA}.pg_get_wal_block_info(%(a)s::pg_lsn, %(b)s::pg_lsn, false) b
                      JOIN pg_class c ON c.relfilenode = b.relfilenode
                     WHERE b.reldatabase = (SELECT oid FROM pg_database
                                             WHERE datname = current_database())
                ), journal_xids AS (
                    SELECT DISTINCT xid FROM blocks WHERE relname = ANY(%(tables)s)
                ), records AS (
                    SELECT r.xid, r.resource_manager, r.record_type
                      FROM {SCHEMA}.pg_get_wal_records_info(%(a)s::pg_lsn, %(b)s::pg_lsn) r
                )
                SELECT
                    (SELECT count(*) FROM records r
                      WHERE r.resource_manager = 'Transaction'
                        AND r.record_type LIKE 'COMMIT%%'
                        AND r.xid IN (SELECT xid FROM journal_xids)),
                    pg_wal_lsn_diff(%(b)s::pg_lsn, %(a)s::pg_lsn)::bigint,
                    (SELECT count(DISTINCT start_lsn) FROM blocks
                      WHERE relname = 'journal_step' AND record_type LIKE '%%UPDATE%%'),
                    (SELECT count(DISTINCT start_lsn) FROM blocks
                      WHERE relname = 'journal_step' AND record_type LIKE 'HOT_UPDATE%%')
                """,  # noqa: S608 - the schema is a constant
                {"a": start.lsn, "b": end.lsn, "tables": list(JOURNAL_TABLES)},
            )
            commits, wal_bytes, updates, hot = cursor.fetchone()
        return Counts(
            statements=end.statements - start.statements,
            nested=end.nested - start.nested,
            commits=int(commits),
            wal_bytes=int(wal_bytes),
            step_updates=int(updates),
            step_hot_updates=int(hot),
        )
