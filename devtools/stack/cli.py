"""The launcher's commands: ``python -m devtools.stack run|test|bench|chaos|manage``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devtools.process import HOST, REPO, Popen, ProcessError, alive, free_port, wait_for_port
from devtools.stack import base
from devtools.stack.app import (
    Child,
    manage,
    manage_output,
    run_foreground,
    stop_leftover_app,
    supervised,
    watch,
)
from devtools.stack.base import (
    MANAGE,
    START_TIMEOUT,
    STOP_TIMEOUT,
    WORKER_STOP_TIMEOUT,
    Interrupted,
    PortInUse,
    env_port,
    log,
    note_signal,
    on_stop_signals,
    raise_interrupted,
    require_free_port,
    shown,
)
from devtools.stack.control import CONTROL_VARIABLE, Server, ServerControl
from devtools.stack.files import leftover, private_dir, secret
from devtools.stack.postgres import (
    APP_ROLE,
    DATABASE,
    DATABASE_ROLES,
    OWNER_ROLE,
    PG_BENCH_SETTINGS,
    PG_TEST_SETTINGS,
    WEB_ROLE,
    WORKER_ROLE,
    Postgres,
)
from devtools.stack.redis import Redis
from devtools.stack.runinfo import manage_environment, run_info, run_info_write
from devtools.stack.sandboxes import start_sandboxes
from devtools.stack.shards import cmd_shards
from devtools.stack.users import (
    app_identity,
    app_python,
    server_identity,
    throwaway_runtime,
)

DEVTOOLS_VARIABLE = "AGENTOPS_DEVTOOLS"
# Where prometheus_client's multiprocess mode keeps each process's metrics (agentops/telemetry).
METRICS_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


def cmd_run() -> int:
    """The demo: PostgreSQL and Redis keeping their data in var/, the sandboxes, migrate and
    seed, then the web server, a worker and the sweeper, kept running until a stop signal."""
    var = base.VAR
    env_in = os.environ
    env = dict(env_in)
    # Production settings (DJANGO_DEBUG off unless you set it), served over plain HTTP on
    # loopback only: no HTTPS redirect, HSTS or secure-only cookies for this one address.
    env.setdefault("DJANGO_HTTPS", "0")
    env["PYTHONUNBUFFERED"] = "1"
    env.pop(DEVTOOLS_VARIABLE, None)  # production: no development tools
    env.setdefault("AGENTOPS_EXAMPLES", "1")  # the demo shows the example app too
    web_port = env_port("AGENTOPS_WEB_PORT", 8000)
    watched: list[tuple[str, Popen]] = []
    # Each server's DATABASE_URL by its kind, when the launcher makes the roles (given a
    # DATABASE_URL of your own, every process uses it).
    kind_urls: dict[str, str] = {}
    cleanup = contextlib.ExitStack()
    try:
        stop_leftover_app("web", argv_has="agentops.gunicorn_conf")
        for name in ("worker", "sweeper"):
            stop_leftover_app(name)
        servers = server_identity()
        app = app_identity(servers)
        # Other users may pass through var/ (not list it) only when the servers run as one.
        private_dir(var, traversable=servers.uid is not None)
        _sweep_abandoned_test_dirs()
        # The launcher's alone: the app and the servers can open none of them.
        for private in ("log", "run", "secrets"):
            private_dir(var / private)
        # Written by collectstatic and read by the web server, which run as `app`: the one
        # thing in var/ the app may touch. The servers' var/pg and var/redis are theirs only;
        # secrets reach the app through its environment.
        static = private_dir(var / "staticfiles")
        app.own(static)
        env.setdefault("DJANGO_STATIC_ROOT", str(static))
        # Every app process writes its counters here and /metrics adds them up
        # (prometheus_client's multiprocess mode), which wants it empty at each start.
        metrics = var / "prometheus"
        shutil.rmtree(metrics, ignore_errors=True)
        app.own(private_dir(metrics))
        env[METRICS_VARIABLE] = str(metrics)
        # Readable lines for this terminal (production logs one JSON object per line), and
        # the alerts' links to these pages.
        env.setdefault("LOG_FORMAT", "text")
        env.setdefault("AGENTOPS_BASE_URL", f"http://{HOST}:{web_port}")
        python, python_env = app_python([app, servers], cleanup)
        env.update(python_env)
        env.update(app.environment())
        if not env.get("DJANGO_SECRET_KEY"):
            # Made once and kept, so sessions survive a restart.
            env["DJANGO_SECRET_KEY"] = secret(var / "secrets" / "django-secret-key", nbytes=50)
        if env.get("DATABASE_URL"):
            log("DATABASE_URL is set: using it, starting no PostgreSQL")
        else:
            pg = Postgres(
                data=var / "pg",
                port=env_port("AGENTOPS_PG_PORT", 54329),
                log_path=var / "log" / "postgres.log",
                secrets_dir=var / "secrets",
            )
            cleanup.callback(pg.stop)
            pg.prepare()
            watched.append(("postgres", pg.start()))
            pg.ensure_roles()
            pg.ensure_database(DATABASE)
            # The launcher's own steps (migrate's grants, the seed) as both kinds; each
            # server below as its own kind's role (docs/design.md §4).
            env["DATABASE_ROLES"] = DATABASE_ROLES
            env["DATABASE_URL"] = pg.url(DATABASE, APP_ROLE)
            env["DATABASE_OWNER_URL"] = pg.url(DATABASE, OWNER_ROLE)
            kind_urls = {"web": pg.url(DATABASE, WEB_ROLE), "worker": pg.url(DATABASE, WORKER_ROLE)}
        if env.get("REDIS_URL"):
            log("REDIS_URL is set: using it, starting no Redis")
        else:
            redis = Redis(
                data=var / "redis",
                port=env_port("AGENTOPS_REDIS_PORT", 63799),
                log_path=var / "log" / "redis.log",
                secrets_dir=var / "secrets",
                persistent=True,
            )
            cleanup.callback(redis.stop)
            watched.append(("redis", redis.start()))
            env["REDIS_URL"] = redis.url

        require_free_port(web_port, "AGENTOPS_WEB_PORT")
        watched += start_sandboxes(env, web_port, cleanup, python, servers, app)
        # For `stack.py manage`: where these servers are, and every setting the launcher
        # gave the app (the sandboxes' addresses, the metrics directory, the log format), so
        # that a command runs as the app does and is not warned about what the launcher set.
        # How to run Python as the app's user `manage` works out again itself.
        own = {**python_env, **app.environment()}
        run_info_write(
            ports={
                "AGENTOPS_WEB_PORT": web_port,
                "AGENTOPS_PG_PORT": env_port("AGENTOPS_PG_PORT", 54329),
                "AGENTOPS_REDIS_PORT": env_port("AGENTOPS_REDIS_PORT", 63799),
            },
            settings={k: v for k, v in env.items() if env_in.get(k) != v and k not in own},
            given=[name for name in ("DATABASE_URL", "REDIS_URL") if env_in.get(name)],
        )
        # Only migrate runs as the owner of the tables; everything after runs as the app role.
        # It holds the owner's credentials, so it runs before gunicorn, the worker and the
        # sweeper, which share its user and so could read its environment.
        manage(["migrate", "--noinput"], env, python, app)
        env.pop("DATABASE_OWNER_URL", None)
        manage(["collectstatic", "--noinput", "--verbosity", "0"], env, python, app)
        # A production WSGI server (settings in agentops/gunicorn_conf.py); WhiteNoise, in
        # the app, serves the static files.
        gunicorn = [python, "-m", "gunicorn", "--config", "python:agentops.gunicorn_conf"]
        gunicorn += ["--bind", f"{HOST}:{web_port}"]
        worker_args = ["rqworker", "default", "--with-scheduler"]
        worker_args += ["--serializer", "rq.serializers.JSONSerializer"]
        web_env = {**env, "DATABASE_URL": kind_urls.get("web", env["DATABASE_URL"])}
        worker_env = {**env, "DATABASE_URL": kind_urls.get("worker", env["DATABASE_URL"])}
        children = [
            Child("web", gunicorn, web_env, stop_timeout=STOP_TIMEOUT, run_as=app),
            Child(
                "worker",
                [python, str(MANAGE), *worker_args],
                worker_env,
                stop_timeout=WORKER_STOP_TIMEOUT,
                run_as=app,
            ),
            # The sweeper rings for tasks the journal says are runnable and nobody runs.
            Child(
                "sweeper",
                [python, str(MANAGE), "sweep"],
                worker_env,
                stop_timeout=STOP_TIMEOUT,
                run_as=app,
            ),
        ]
        kept = [supervised(child) for child in children]
        for child, process in zip(children, kept, strict=True):
            cleanup.callback(child.stop)
            process.start()
        wait_for_port(web_port, what="the web server", timeout=START_TIMEOUT, proc=kept[0].proc)
        # Quiet, once the worker has run the demo's tasks, so that the summary ends the
        # start-up's noise: the login, its password (on the run that created it only), the
        # demo's customer pages.
        seeded = manage_output(["demo_seed", "--summary", "--wait", "30"], env, python, app)
        summary = json.loads(seeded)
        address = f"http://{HOST}:{web_port}"
        log(f"  queues: {address}/django-rq/   health: {address}/healthz")
        log(f"  metrics: {address}/metrics  (from this machine; rules in deploy/prometheus/)")
        if not env_in.get("DATABASE_URL") or not env_in.get("REDIS_URL"):
            log("  data is kept in var/, server logs are in var/log/")
        for line in summary_lines(address, summary):
            log(line)
        return watch(watched, kept)
    except Interrupted as stop:
        log(f"{stop} received; stopping")
        return 0
    except ProcessError as error:
        log(f"error: {error}")
        return 1
    finally:
        on_stop_signals(note_signal)
        cleanup.close()


def summary_lines(address: str, summary: dict[str, Any]) -> list[str]:
    """The few lines `run` ends its start-up with: where to go, how to log in, and the
    pages of the demo's tasks (the customer's pages of two renewals, as the shipped kinds
    declare them)."""
    rule = "-" * 72
    lines = [rule, f"agentops is up at {address}/"]
    if summary.get("password"):
        lines.append(
            f"  log in as {summary['login']}, password {summary['password']}  (shown on this "
            "first run only)"
        )
    else:
        lines.append(
            f"  log in as {summary.get('login', 'operator')}, with the password shown on the "
            "first run (python scripts/stack.py manage -- changepassword operator sets another)"
        )
    for page in summary.get("pages") or ():
        label = page["label"][:1].lower() + page["label"][1:]  # "customer's page"
        lines.append(f"  {label} of {page['task']} ({page['shows']}):")
        lines.append(f"    {page['url']}")
    lines.append("  Ctrl-C stops everything; a web server, worker or sweeper that dies restarts")
    lines.append(rule)
    return lines


def _sweep_abandoned_test_dirs() -> None:
    """Remove what `test` runs killed with SIGKILL left behind, servers included, and the
    Pythons linked for the app (users.app_python) by any run so killed."""
    private_runtimes = [
        *Path(tempfile.gettempdir()).glob("agentops-test-*-*"),
        *Path(tempfile.gettempdir()).glob("agentops-python-*-*"),
    ]
    for root in [*base.VAR.glob("test-*"), *private_runtimes]:
        try:
            owner = int(root.name.split("-")[-2 if root.parent != base.VAR else -1])
        except (ValueError, IndexError):
            continue
        if root.is_symlink() or (root.parent != base.VAR and root.stat().st_uid != os.geteuid()):
            continue  # not one we made
        if owner == os.getpid() or alive(owner):
            continue
        stale_pg = leftover(root / "pg" / "postmaster.pid", root / "pg", comm="postgres")
        stale_redis = leftover(root / "redis" / "redis.pid", root / "redis", comm="redis-server")
        for pid in (stale_pg, stale_redis):
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)


def cmd_test(cmd: Sequence[str], *, mode: str = "test") -> int:
    """Throwaway servers around CMD. ``mode``: ``test`` (fast settings), ``bench`` (durable
    PostgreSQL), ``chaos`` (migrated first; CMD then runs as the app's role only). CMD may
    restart the servers through the control socket (devtools.stack.control); for ``bench``
    and ``chaos`` it may run the development tools' commands (AGENTOPS_DEVTOOLS=1)."""
    env = dict(os.environ)
    root = base.VAR / f"test-{os.getpid()}"
    cleanup = contextlib.ExitStack()
    started = time.monotonic()
    restartable: dict[str, Server] = {}
    try:
        run_as = server_identity()
        traversable = run_as.uid is not None
        private_dir(base.VAR, traversable=traversable)
        _sweep_abandoned_test_dirs()
        runtime = throwaway_runtime(run_as)
        pg_install: Path | None = None
        redis_server: Path | None = None
        if runtime is not None:
            root, pg_install, redis_server = runtime
        else:
            root.mkdir()
        cleanup.callback(shutil.rmtree, root, ignore_errors=True)
        private_dir(root, traversable=traversable)
        if env.get("DATABASE_URL"):
            log("DATABASE_URL is set: using it, starting no PostgreSQL")
        else:
            for attempt in range(3):
                pg = Postgres(
                    data=root / "pg",
                    port=free_port(),
                    log_path=root / "postgres.log",
                    secrets_dir=root / "secrets",
                    # A benchmark measures real commits: only the connection limit changes.
                    settings=PG_BENCH_SETTINGS if mode == "bench" else PG_TEST_SETTINGS,
                    throwaway=True,
                    install=pg_install,
                )
                cleanup.callback(pg.stop)
                try:
                    pg.prepare()
                    pg.start()
                    restartable["postgres"] = pg
                    break
                except PortInUse:
                    if attempt == 2:
                        raise
            # The owner may create databases here: pytest-django makes test_agentops.
            pg.ensure_roles(owner_creates_databases=True)
            pg.ensure_database(DATABASE)
            pg.server_stats(DATABASE)
            # CMD runs both kinds in one process (tests, the benchmark, the chaos run): it
            # connects as the role that is both; each kind's own is there to be tried as.
            env["DATABASE_ROLES"] = DATABASE_ROLES
            env["DATABASE_URL"] = pg.url(DATABASE, APP_ROLE)
            env["DATABASE_WEB_URL"] = pg.url(DATABASE, WEB_ROLE)
            env["DATABASE_WORKER_URL"] = pg.url(DATABASE, WORKER_ROLE)
            env["DATABASE_OWNER_URL"] = pg.url(DATABASE, OWNER_ROLE)
        if env.get("REDIS_URL"):
            log("REDIS_URL is set: using it, starting no Redis")
        else:
            for attempt in range(3):
                redis = Redis(
                    data=root / "redis",
                    port=free_port(),
                    log_path=root / "redis.log",
                    secrets_dir=root / "secrets",
                    persistent=False,
                    server=redis_server,
                )
                cleanup.callback(redis.stop)
                try:
                    redis.start()
                    restartable["redis"] = redis
                    break
                except PortInUse:
                    if attempt == 2:
                        raise
            env["REDIS_URL"] = redis.url
        # The metrics of every process CMD starts (workers, the app), thrown away with root.
        metrics = root / "prometheus"
        metrics.mkdir(mode=0o700)
        env[METRICS_VARIABLE] = str(metrics)
        if restartable:
            # Stopped before the servers (an ExitStack unwinds last in, first out).
            control = ServerControl(root / "control.sock", restartable)
            cleanup.callback(control.close)
            env[CONTROL_VARIABLE] = str(control.path)
        if mode in ("bench", "chaos"):
            env[DEVTOOLS_VARIABLE] = "1"  # `manage.py bench` and `manage.py chaos`
        if mode == "chaos":
            # Production settings, as `make run`; the key is thrown away with the servers.
            env.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
            env.setdefault("DJANGO_HTTPS", "0")
            manage(["migrate", "--noinput", "--verbosity", "0"], env)
            env.pop("DATABASE_OWNER_URL", None)  # CMD runs as the app's role only
        log(f"servers ready in {time.monotonic() - started:.1f}s; running {' '.join(cmd)}")
        return run_foreground(cmd, env)
    except Interrupted as stop:
        log(f"{stop} received; stopping")
        return 128 + stop.signum
    except ProcessError as error:
        log(f"error: {error}")
        return 1
    finally:
        on_stop_signals(note_signal)
        stopping = time.monotonic()
        cleanup.close()
        log(f"servers stopped and {shown(root)} removed in {time.monotonic() - stopping:.1f}s")


def cmd_manage(args: Sequence[str]) -> int:
    """manage.py ARGS against the servers `make run` started, as the app's role, and (when
    we are root) as the app's user (AGENTOPS_APP_USER).

    The credentials come from var/secrets (owner-only), through the environment.
    """
    env = dict(os.environ)
    env.setdefault("AGENTOPS_EXAMPLES", "1")  # as `run` serves it
    # The ports and settings the last `make run` used (var/run/stack.json), unless set here.
    unreachable = manage_environment(env, run_info())
    if unreachable:
        log(f"error: {unreachable}")
        return 1
    secrets_dir = base.VAR / "secrets"
    needed = {
        "DATABASE_URL": secrets_dir / f"postgres-{APP_ROLE}",
        "REDIS_URL": secrets_dir / "redis",
        "DJANGO_SECRET_KEY": secrets_dir / "django-secret-key",
    }
    missing = [shown(p) for name, p in needed.items() if not env.get(name) and not p.exists()]
    if missing:
        log(f"error: {', '.join(missing)} not found: start the stack once with `make run`")
        return 1
    if not env.get("DATABASE_URL"):
        env.setdefault("DATABASE_ROLES", DATABASE_ROLES)  # as `run` granted them
        password = needed["DATABASE_URL"].read_text().strip()
        port = env_port("AGENTOPS_PG_PORT", 54329, env)
        env["DATABASE_URL"] = f"postgres://{APP_ROLE}:{password}@{HOST}:{port}/{DATABASE}"
    if not env.get("REDIS_URL"):
        password = needed["REDIS_URL"].read_text().strip()
        redis_port = env_port("AGENTOPS_REDIS_PORT", 63799, env)
        env["REDIS_URL"] = f"redis://:{password}@{HOST}:{redis_port}/0"
    if not env.get("DJANGO_SECRET_KEY"):  # read only when not given (it may not exist then)
        env["DJANGO_SECRET_KEY"] = needed["DJANGO_SECRET_KEY"].read_text().strip()
    env.setdefault("DJANGO_HTTPS", "0")
    # `python scripts/stack.py manage` is typed with any python: run manage.py with the
    # project's own (make creates .venv), whichever started this.
    venv_python = REPO / ".venv" / "bin" / "python"
    python = str(venv_python) if venv_python.exists() else sys.executable
    with contextlib.ExitStack() as cleanup:
        try:
            app = app_identity(server_identity())
            python, python_env = app_python([app], cleanup, python)
        except ProcessError as error:
            log(f"error: {error}")
            return 1
        env.update(python_env)
        env.update(app.environment())
        return run_foreground([python, str(MANAGE), *args], env, app)


USAGE = """Run agentops on a fresh machine: embedded PostgreSQL and Redis, then the app or a
command.

    python -m devtools.stack run              # the demo; data kept under var/pg and var/redis
    python -m devtools.stack test -- CMD ...  # throwaway servers around CMD, exit with its code
    python -m devtools.stack test --shards N -- CMD ...  # N of those side by side, CMD as
                                              # shard I of N each (AGENTOPS_TEST_SHARD=I/N)
    python -m devtools.stack bench -- CMD ... # the same, PostgreSQL durable (fsync on)
    python -m devtools.stack chaos -- CMD ... # the same, migrated; CMD may restart the servers
    python -m devtools.stack manage -- ARGS   # manage.py ARGS against the servers `run` started

(`python scripts/stack.py ...` is the same.) A server is started only when its URL
(DATABASE_URL, REDIS_URL) is unset; otherwise that URL is used as given.
"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.stack",
        description=USAGE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run", help="the demo: PostgreSQL, Redis, migrate, web server, worker")
    test = commands.add_parser("test", help="throwaway PostgreSQL and Redis around a command")
    test.add_argument(
        "--shards",
        type=int,
        default=1,
        metavar="N",
        help="N launchers side by side, servers each, CMD as shard I of N (tests/sharding.py)",
    )
    test.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    bench = commands.add_parser("bench", help="like test, with a durable PostgreSQL (fsync on)")
    bench.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    chaos = commands.add_parser(
        "chaos", help="like test, migrated, with servers CMD may crash and restart"
    )
    chaos.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    manage_parser = commands.add_parser(
        "manage", help="manage.py against the servers of `make run`"
    )
    manage_parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- MANAGE.PY ARGS...")
    args = parser.parse_args(argv)

    on_stop_signals(raise_interrupted)
    if args.command == "run":
        return cmd_run()
    if args.command == "manage":
        return cmd_manage(args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd)
    cmd = list(args.cmd)
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    if not cmd:
        parser.error(f"{args.command} needs a command: {args.command} -- CMD ARGS...")
    if args.command == "test" and args.shards != 1:
        if args.shards < 1:
            parser.error("--shards takes a number of shards, 1 or more")
        return cmd_shards(cmd, args.shards)
    return cmd_test(cmd, mode=args.command)


if __name__ == "__main__":
    sys.exit(main())
