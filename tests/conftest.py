from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest_plugins = ["tests.sandbox.fixtures"]


@pytest.fixture(scope="session")
def django_db_setup(django_test_environment: None, django_db_blocker: Any) -> Iterator[None]:
    """Create the test database (migrated, triggers included) once, drop it at the end.

    pytest-django only creates it for tests marked ``django_db``, whose per-test
    transaction or flush this suite does not use: see :func:`committed`.
    """
    from django.test.utils import setup_databases, teardown_databases

    with django_db_blocker.unblock():
        config = setup_databases(verbosity=0, interactive=False, aliases={"default": {}})
    yield
    with django_db_blocker.unblock():
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
