from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from typing import Any

import pytest

pytest_plugins = [
    "tests.sandbox.fixtures",
    "tests.agentops.sandboxed",
    "tests.agentops.workers",
    "tests.agentops.mcp_support",
    "tests.sharding",
]

# --- Visible gates: a test needs what it needs, or fails saying so ----------------------------

DESELECT = "run the tests as `make test` does (scripts/stack.py test -- pytest ...), or leave "
DESELECT += "them out in so many words: -m 'not stack'"


def _stack_missing(servers: tuple[str, ...]) -> str | None:
    """Why a ``@pytest.mark.stack(*servers)`` test cannot run here, or None if it can."""
    from devtools.stack.control import CONTROL_VARIABLE, stack_control

    if not os.environ.get(CONTROL_VARIABLE):
        return (
            f"this test needs the servers scripts/stack.py starts and its control socket "
            f"({CONTROL_VARIABLE} is not set): {DESELECT}"
        )
    answer = stack_control("servers", timeout=30.0)
    if not answer or not answer.get("ok"):
        return f"scripts/stack.py's control socket did not answer ({answer}): {DESELECT}"
    started = set(answer.get("servers", []))
    missing = [name for name in servers if name not in started]
    if missing:
        return (
            f"this test needs {' and '.join(missing)} started by scripts/stack.py, which was "
            f"given {'their URLs' if len(missing) > 1 else 'its URL'} and started "
            f"{' and '.join(sorted(started)) or 'neither'}: {DESELECT}"
        )
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker("stack")
    if marker is not None:
        why = _stack_missing(tuple(marker.args))
        if why is not None:
            pytest.fail(why, pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """No test is skipped to go green: a skip, whatever raised it, is reported as a failure
    with its reason. A test that cannot run somewhere says what it needs with a marker, and
    whoever runs without that deselects it (``-m 'not stack'``), which the summary shows."""
    report = yield
    if report.skipped and not hasattr(report, "wasxfail"):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped, and this suite allows no skip: {reason}"
    return report


@pytest.fixture(autouse=True, scope="session")
def redis_emptied_key_by_key() -> Iterator[None]:
    """Tests empty Redis with ``flushdb()``; the Redis of scripts/stack.py refuses FLUSHDB (the
    app never sends it: tests/test_redis_hardening.py), so here it deletes every key instead.
    The app's own code never calls it, so nothing it does is changed."""
    import redis

    def flushdb(self: redis.Redis, asynchronous: bool = False, **kwargs: Any) -> bool:
        batch: list[bytes] = []
        for key in self.scan_iter(count=1000):
            batch.append(key)
            if len(batch) == 1000:
                self.delete(*batch)
                batch.clear()
        if batch:
            self.delete(*batch)
        return True

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(redis.Redis, "flushdb", flushdb)
        yield


@pytest.fixture(scope="session")
def django_db_setup(django_test_environment: None, django_db_blocker: Any) -> Iterator[None]:
    """Create the test database (migrated, triggers included) once, drop it at the end.

    It is created and migrated as the role that owns the tables (the ``owner`` connection,
    from DATABASE_OWNER_URL), as production migrates; every test then runs as the app's own
    role (``default``, DATABASE_URL), which owns nothing and may change only what
    agentops/dbroles.py lists. So the whole suite shows the app works with least privilege.

    pytest-django only creates it for tests marked ``django_db``, whose per-test
    transaction or flush this suite does not use: see :func:`committed`.
    """
    from django.db import DEFAULT_DB_ALIAS, connections
    from django.test.utils import setup_databases, teardown_databases

    from agentops.dbroles import OWNER_ALIAS

    creator = OWNER_ALIAS if OWNER_ALIAS in connections else DEFAULT_DB_ALIAS
    with django_db_blocker.unblock():
        config = setup_databases(verbosity=0, interactive=False, aliases={creator: {}})
        if creator != DEFAULT_DB_ALIAS:
            test_name = connections[creator].settings_dict["NAME"]
            connections[DEFAULT_DB_ALIAS].close()
            connections[DEFAULT_DB_ALIAS].settings_dict["NAME"] = test_name
    yield
    with django_db_blocker.unblock():
        # The app role's connections would keep the database from being dropped.
        connections.close_all()
        teardown_databases(config, verbosity=0)


@pytest.fixture
def committed(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """Database access with real commits, as in production (no wrapping test transaction).

    The journal's promises are about what is committed when, and its tables refuse
    TRUNCATE, so these tests never flush: each works on its own fresh tasks and business
    objects. The test database is dropped at the end of the session.
    """
    with django_db_blocker.unblock():
        yield


@pytest.fixture
def app_server(committed: None) -> Iterator[str]:
    """The Django app served over real HTTP from a thread; yields its base URL.

    pytest-django's ``live_server`` would make the test transactional, and its flush is
    refused by the journal's append-only tables; this server shares the committed database.
    """
    import threading
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    from django.core.wsgi import get_wsgi_application
    from django.db import connections

    django_app = get_wsgi_application()

    def app(environ: Any, start_response: Any) -> Any:
        try:
            return list(django_app(environ, start_response))
        finally:
            connections.close_all()  # this request's thread is done with the database

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True

    server = make_server("127.0.0.1", 0, app, server_class=Server, handler_class=Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
