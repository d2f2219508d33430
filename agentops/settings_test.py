"""Test settings: explicit about everything that differs from production."""

from __future__ import annotations

import os
import tempfile

from agentops import conf, shared_settings

os.environ.setdefault("DJANGO_DEBUG", "1")
# The example app (examples/support) is tested like the shipped kinds, and the processes the
# tests start (workers, gunicorn) inherit the switch.
os.environ.setdefault("AGENTOPS_EXAMPLES", "1")
# Its provider's address, for the start-up checks: a port where nothing listens (the tests
# that use the support provider point this at the sandbox they start).
os.environ.setdefault("SUPPORT_API_BASE", "http://127.0.0.1:9")
# Metrics in multiprocess mode, as in production, so the workers a test starts report to the
# /metrics it reads. scripts/stack.py test gives every run a fresh directory; a run without
# it gets one here. prometheus_client reads the variable when first imported: it must be set
# before anything imports it, and it is inherited by the processes the tests start.
if not shared_settings.metrics_dir():
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="agentops-metrics-")

from agentops.settings import *  # noqa: E402, F403

# Passwords in tests need not resist attackers, only be quick to check.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Short leases so tests that take over an abandoned task wait fractions of a second.
JOURNAL_LEASE_SECONDS = 2.0
DATABASES["default"]["OPTIONS"].update(session_options(JOURNAL_LEASE_SECONDS))  # noqa: F405

# The sweeper re-rings a task after a second, not half a minute.
SWEEP_GRACE_SECONDS = 1.0

# No audit runs on its own in the processes the tests start (an audit over days of other
# tests' steps would hand their tasks to a person): the audit's own tests run it, or set these.
# A value set in the environment is kept, as the settings read it.
AUDIT_INTERVAL_SECONDS = (
    AUDIT_INTERVAL_SECONDS if conf.raw("AUDIT_INTERVAL_SECONDS") else 0.0  # noqa: F405
)
AUDIT_RESTART_CHECK_SECONDS = (
    AUDIT_RESTART_CHECK_SECONDS if conf.raw("AUDIT_RESTART_CHECK_SECONDS") else 0.0  # noqa: F405
)
# Nor does the journal's retention: its own tests run it, on ranges of their own.
JOURNAL_RETENTION_INTERVAL_SECONDS = (
    JOURNAL_RETENTION_INTERVAL_SECONDS  # noqa: F405
    if conf.raw("JOURNAL_RETENTION_INTERVAL_SECONDS")
    else 0.0
)

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
