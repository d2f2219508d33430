"""Test settings: explicit about everything that differs from production."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_DEBUG", "1")

from agentops.settings import *  # noqa: E402, F403

# Passwords in tests need not resist attackers, only be quick to check.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Short leases so tests that take over an abandoned task wait fractions of a second.
JOURNAL_LEASE_SECONDS = 2.0
DATABASES["default"]["OPTIONS"].update(idle_in_transaction_limit(JOURNAL_LEASE_SECONDS))  # noqa: F405

# The sweeper re-rings a task after a second, not half a minute.
SWEEP_GRACE_SECONDS = 1.0

# In-process tests render pages without running collectstatic first: plain storage, no
# manifest. The served-like-production tests run gunicorn with the real settings and a
# collectstatic of their own (tests/agentops/test_serving.py).
STORAGES = {
    **STORAGES,  # noqa: F405
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# WhiteNoise serves from the apps' own static folders in-process (no collected copy).
STATIC_ROOT = None  # type: ignore[assignment]
WHITENOISE_USE_FINDERS = True
