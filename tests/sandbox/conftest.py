"""The sandbox fixtures live in :mod:`tests.sandbox.fixtures` (registered for the whole
suite by ``pytest_plugins`` in ``tests/conftest.py``). These tests need no database."""
