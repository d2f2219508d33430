"""agentops settings: every value the app reads from the environment is read here, once.

The README lists each variable with what it does. Defaults suit the demo (`make run`),
which points DATABASE_URL and REDIS_URL at the embedded servers it starts.
"""

from __future__ import annotations

import os
from datetime import timedelta
from ipaddress import ip_network
from pathlib import Path

import dj_database_url
from django.core.checks.security.base import (
    SECRET_KEY_INSECURE_PREFIX,
    SECRET_KEY_MIN_LENGTH,
    SECRET_KEY_MIN_UNIQUE_CHARACTERS,
)
from django.core.exceptions import ImproperlyConfigured

from agentops.logs import LogFormatRefused, logging_config

BASE_DIR = Path(__file__).resolve().parent.parent


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return default if raw in (None, "") else float(raw)


DEBUG = _env_bool("DJANGO_DEBUG", False)


def _weak_secret(key: str) -> str:
    """Why `key` is too weak to sign sessions and CSRF tokens with (Django's own bar)."""
    if len(key) < SECRET_KEY_MIN_LENGTH:
        return f"it has {len(key)} characters, fewer than {SECRET_KEY_MIN_LENGTH}"
    if len(set(key)) < SECRET_KEY_MIN_UNIQUE_CHARACTERS:
        return f"it has fewer than {SECRET_KEY_MIN_UNIQUE_CHARACTERS} distinct characters"
    if key.startswith(SECRET_KEY_INSECURE_PREFIX):
        return "it is a key Django generated for development"
    return ""


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
if not DEBUG:
    if not SECRET_KEY:
        raise ImproperlyConfigured("DJANGO_SECRET_KEY must be set when DJANGO_DEBUG is off")
    if weakness := _weak_secret(SECRET_KEY):
        raise ImproperlyConfigured(
            f"DJANGO_SECRET_KEY is too weak: {weakness}. Generate one with "
            "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`"
        )
elif not SECRET_KEY:
    SECRET_KEY = "insecure-development-key-only-for-debug-runs"  # noqa: S105

ALLOWED_HOSTS = [
    h.strip() for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1").split(",")
]
CSRF_TRUSTED_ORIGINS = [
    o.strip() for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "django_rq",
    # Counts failed logins and locks the address out for a while (LOGIN_FAILURE_LIMIT).
    "axes",
    # The HTTP API's docs page (/api/v1/docs): ninja's templates and its Swagger UI, served
    # from this site like every other static file (agentops/api).
    "ninja",
    "journal",
    "agentops",
    "agentops.operators",
    # Notifications out: the agent builder's own endpoint told of tasks that need a person,
    # await approval, finish or are compensated (agentops/notifications).
    "agentops.notifications",
    # The provider audit: each provider's records matched, by key, against the journal, daily
    # and after a provider restarts; findings for people (agentops/audit).
    "agentops.audit",
    # The shipped task kinds (renewals, trips, reminders), an app on the public API.
    "commerce",
]
# The example to copy (examples/support: support goodwill, on the public API alone), with its
# own stand-in provider. The demo (`make run`) and the tests install it; a deployment does not
# carry an example's kind unless it asks for it.
if _env_bool("AGENTOPS_EXAMPLES", False):
    INSTALLED_APPS.append("examples.support")
# Your own apps (README, "Your own app"): their dotted names, comma-separated, each an
# importable package with an effects.py (found as admin.py is). An environment variable
# rather than a settings module of your own: every process the launcher starts (the web
# server, the workers, the sweeper, `stack.py manage`) reads the same environment, ours
# stays the one settings module, and a tool's own settings may be read from the environment
# too (agentops.effects.tool_setting).
AGENTOPS_APPS = [name.strip() for name in os.environ.get("AGENTOPS_APPS", "").split(",")]
AGENTOPS_APPS = [name for name in AGENTOPS_APPS if name]
for _app in AGENTOPS_APPS:
    if not all(part.isidentifier() for part in _app.split(".")):
        raise ImproperlyConfigured(
            f"AGENTOPS_APPS: {_app!r} is not an app's dotted name (a package to import, "
            "such as giftcards or myco.giftcards); separate names with commas"
        )
    if _app not in INSTALLED_APPS:
        INSTALLED_APPS.append(_app)
# The development tools (devtools/: the chaos run, the benchmark) are not shipped; their
# commands (`manage.py chaos`, `manage.py bench`) exist only where this is set, as the
# launcher's `chaos` and `bench` commands set it. A production process never imports them.
if _env_bool("AGENTOPS_DEVTOOLS", False):
    INSTALLED_APPS.append("devtools")

AUTHENTICATION_BACKENDS = [
    # First, so a locked-out address is refused before any password is checked.
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]

MIDDLEWARE = [
    # First: a load balancer's probe is answered before host checks and HTTPS redirects.
    "agentops.health.HealthCheckMiddleware",
    # Prometheus scrapes each machine by its address, as a probe does; /metrics checks its
    # caller itself: an allowed address or a token (agentops/telemetry/exposition.py).
    "agentops.telemetry.exposition.MetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Static files from the app itself (the admin's CSS), compressed and cached forever.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Default deny: every page needs a login but those marked open (login, the customer's
    # payment page, the Stripe webhook; /healthz is answered before any of this).
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    # The pages' Content-Security-Policy: scripts, styles and images from this site only.
    "agentops.security.ContentSecurityPolicyMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes requires: turns a lockout into its 429 response.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "agentops.urls"
WSGI_APPLICATION = "agentops.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# PostgreSQL is the single source of truth (docs/design.md §4); nothing else is supported.
DATABASE_URL = os.environ.get("DATABASE_URL", "")
if not DATABASE_URL:
    raise ImproperlyConfigured(
        "DATABASE_URL is not set. `make run` and `make test` start an embedded PostgreSQL and "
        "set it for you; to use your own server, export DATABASE_URL=postgres://user:pass@host/db"
    )
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
# The role that owns the tables and runs migrations (agentops/dbroles.py). Give it only to
# `manage.py migrate`: every other process connects as DATABASE_URL's role, which owns
# nothing and may write the journal only through the functions its kind of process calls.
DATABASE_OWNER_URL = os.environ.get("DATABASE_OWNER_URL", "")
if DATABASE_OWNER_URL:
    DATABASES["owner"] = dj_database_url.parse(DATABASE_OWNER_URL, conn_max_age=0)


def _database_roles(text: str) -> dict[str, tuple[str, ...]]:
    """``role=kind[+kind],...`` (journal/callers.py's kinds: people, runner)."""
    roles: dict[str, tuple[str, ...]] = {}
    for item in text.split(","):
        role, _, kinds = item.strip().partition("=")
        if not role.strip():
            continue
        named = tuple(k.strip() for k in kinds.split("+") if k.strip())
        if not named or not set(named) <= {"people", "runner"}:
            raise ImproperlyConfigured(
                f"DATABASE_ROLES: {item.strip()!r} is not role=people, role=runner or "
                "role=people+runner"
            )
        roles[role.strip()] = named
    return roles


# The database role of each kind of process (docs/design.md §4, "A role for each kind of
# process"), which `migrate` grants exactly what that kind may do: `people` for what faces
# the network (the web server, the HTTP API, the MCP server: people's and programs'
# decisions), `runner` for the workers and the sweeper (leases, records, settlements). Each
# process connects as its own through its DATABASE_URL.
DATABASE_ROLES = _database_roles(
    os.environ.get("DATABASE_ROLES", "agentops_web=people,agentops_worker=runner")
)
DATABASE_ROUTERS = ["agentops.dbroles.MigrationRouter"]
for _alias, _db in DATABASES.items():
    if _db["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured("agentops needs PostgreSQL (its journal relies on triggers)")

# Redis is only a doorbell: losing it loses no work (docs/design.md §4).
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
RQ_QUEUES = {
    # Jobs carry ids only, as JSON: never pickle.
    "default": {
        "URL": REDIS_URL,
        "DEFAULT_TIMEOUT": 300,
        "SERIALIZER": "rq.serializers.JSONSerializer",
    },
}
RQ = {
    # Jobs are enqueued only once the transaction that decided them has committed.
    "COMMIT_MODE": "on_db_commit",
    # One process runs job after job (no fork per job): see README, "Workers". It runs only
    # agentops' own jobs, read as JSON (agentops/workers.py).
    "WORKER_CLASS": "agentops.workers.AgentopsWorker",
    "JOB_CLASS": "agentops.workers.AgentopsJob",
}
# django-rq's pages in the admin check only is_staff; ours are at /django-rq/ behind a
# permission (agentops/urls.py).
RQ_SHOW_ADMIN_LINK = False

# Running tasks (agentops/runner.py).
PLANNER = os.environ.get("PLANNER", "scripted")  # scripted | anthropic | openai
# Seconds before each reconciliation round of an unknown step (journal Policy); when they
# are used up the task needs a human. The default reaches past Stripe's search lag.
RECONCILE_SCHEDULE = tuple(
    float(s) for s in os.environ.get("RECONCILE_SCHEDULE", "1,2,5,15,30,60,120").split(",")
)
# Seconds before each harness retry of a step that did not happen for a passing reason (the
# provider could not be reached); when they are used up the planner decides with the facts.
TRANSIENT_RETRY_SCHEDULE = tuple(
    float(s) for s in os.environ.get("TRANSIENT_RETRY_SCHEDULE", "1,5,30").split(",") if s
)
# Runs in a row that may end without finishing cleanly (a crashed worker, a lost database)
# before the task is handed to a human instead of being run again.
MAX_FAILED_RUNS = int(os.environ.get("MAX_FAILED_RUNS", "5"))
# How long a saga held for a person's approval may wait for the decision (and then for its
# use) before the request expires and the saga asks again: a weekend, and a day.
APPROVAL_TTL_SECONDS = _env_float("APPROVAL_TTL_SECONDS", 3 * 24 * 3600.0)
RUN_JOB_TIMEOUT_SECONDS = int(os.environ.get("RUN_JOB_TIMEOUT_SECONDS", "600"))
SWEEP_INTERVAL_SECONDS = _env_float("SWEEP_INTERVAL_SECONDS", 5.0)
# A task enqueued this recently is not enqueued again by the sweeper (the doorbell's echo).
SWEEP_GRACE_SECONDS = _env_float("SWEEP_GRACE_SECONDS", 30.0)
# A task the sweeper rang for that no run has taken since is rung again after a pause that
# doubles from SWEEP_GRACE_SECONDS up to this: a queue that waits for stalled workers does not
# fill with copies of one run, and a lost job is still found again.
SWEEP_BACKOFF_MAX_SECONDS = _env_float("SWEEP_BACKOFF_MAX_SECONDS", 600.0)
# Wrappers the runner's tools go through (agentops.tools.tools_wrapped), as dotted paths,
# comma-separated. None in production: the chaos run arms its workers with a fault
# (devtools.chaos.kill), and nothing else is meant to be here.
TOOL_WRAPPERS = [
    p.strip() for p in os.environ.get("AGENTOPS_TOOL_WRAPPERS", "").split(",") if p.strip()
]
# Wrappers the planner goes through (agentops.planners.planner_get), the same way. None in
# production: the chaos run gives its workers a model that slips (devtools.chaos.model).
PLANNER_WRAPPERS = [
    p.strip() for p in os.environ.get("AGENTOPS_PLANNER_WRAPPERS", "").split(",") if p.strip()
]

# The journal (see journal/README.md). A task's lease lasts this long past its holder's last
# journal write; it must exceed the longest tool call, so a live runner never loses it.
JOURNAL_LEASE_SECONDS = _env_float("JOURNAL_LEASE_SECONDS", 60.0)
# The journal's per-step statements are prepared on the server (journal/db.py): parsed and
# planned once per connection. Off only behind a pooler in transaction mode that cannot keep
# a session's prepared statements (PgBouncer before 1.21).
JOURNAL_PREPARED_STATEMENTS = _env_bool("JOURNAL_PREPARED_STATEMENTS", True)


def session_options(lease_seconds: float) -> dict[str, str]:
    """How the app's database sessions are set up.

    - They end when idle inside a transaction for a lease's length. No service waits on
      anything but the database inside a transaction (provider calls happen between them),
      so only a process that stopped mid-write (SIGSTOP, a frozen VM, a debugger) is ever cut
      off. Such a runner holds its task's row lock: without this, every runner that takes the
      task up after the lease expired would wait for it, however long. Its write rolls back
      and it finds out when it wakes (journal.run.DatabaseLost).
    - Their statements (the journal's prepared ones, its functions' own) are planned once per
      session and their partitions pruned as they run (docs/design.md §17): PostgreSQL would
      otherwise plan a statement on the partitioned tables again at every call, judging a
      plan for any values dearer than one for the values at hand, as it counts every
      partition.
    """
    return {
        "options": f"-c idle_in_transaction_session_timeout={int(lease_seconds * 1000)} "
        "-c plan_cache_mode=force_generic_plan"
    }


DATABASES["default"].setdefault("OPTIONS", {}).update(session_options(JOURNAL_LEASE_SECONDS))
# Django turns psycopg's prepared statements off (None); 0 prepares a statement on its first
# use, in the only cursors that can: the journal's server-binding ones (journal/db.py).
DATABASES["default"]["OPTIONS"]["prepare_threshold"] = 0 if JOURNAL_PREPARED_STATEMENTS else None

# Tools (agentops/tools/). Each provider's address, credentials and how long it remembers
# idempotency keys. An empty *_API_BASE means the real service (Stripe); the sandbox
# providers (sandbox/) stand in for all three in the demo and the tests.
TOOL_TIMEOUT_SECONDS = _env_float("TOOL_TIMEOUT_SECONDS", 5.0)
# Per-tool overrides, "charge_customer=8,send_email=3".
TOOL_TIMEOUTS = {
    name.strip(): float(seconds)
    for name, _, seconds in (
        item.partition("=") for item in os.environ.get("TOOL_TIMEOUTS", "").split(",")
    )
    if name.strip()
}
STRIPE_API_KEY = os.environ.get("STRIPE_API_KEY", "")
STRIPE_API_BASE = os.environ.get("STRIPE_API_BASE", "")
STRIPE_WEBHOOK_SECRET = os.environ.get("STRIPE_WEBHOOK_SECRET", "")
# A web server given no secret at all, on purpose: it stores every well-formed, signed event,
# and only the workers (which have STRIPE_WEBHOOK_SECRET) verify and apply them, so even a
# web server taken over cannot sign one (commerce/webhooks.py). Off: a web server without the
# secret refuses every event, saying so.
STRIPE_WEBHOOK_CHECKED_BY_WORKERS = _env_bool("STRIPE_WEBHOOK_CHECKED_BY_WORKERS", False)
STRIPE_KEY_LIFETIME_SECONDS = _env_float("STRIPE_KEY_LIFETIME_SECONDS", 24 * 3600.0)
STRIPE_SEARCH_LAG_SECONDS = _env_float("STRIPE_SEARCH_LAG_SECONDS", 60.0)
STRIPE_MAX_NETWORK_RETRIES = int(os.environ.get("STRIPE_MAX_NETWORK_RETRIES", "0"))
MAIL_API_BASE = os.environ.get("MAIL_API_BASE", "")
MAIL_API_KEY = os.environ.get("MAIL_API_KEY", "")
MAIL_KEY_LIFETIME_SECONDS = _env_float("MAIL_KEY_LIFETIME_SECONDS", 24 * 3600.0)
BOOKINGS_API_BASE = os.environ.get("BOOKINGS_API_BASE", "")
BOOKINGS_API_KEY = os.environ.get("BOOKINGS_API_KEY", "")
BOOKINGS_KEY_LIFETIME_SECONDS = _env_float("BOOKINGS_KEY_LIFETIME_SECONDS", 24 * 3600.0)
SUPPORT_API_BASE = os.environ.get("SUPPORT_API_BASE", "")
SUPPORT_KEY_LIFETIME_SECONDS = _env_float("SUPPORT_KEY_LIFETIME_SECONDS", 24 * 3600.0)

# Planners (agentops/planners/): the model adapters. An empty *_BASE_URL means the vendor's
# own API; set it to any compatible server (for OpenAI: vLLM, Ollama, a gateway, ...).
ANTHROPIC_API_KEY = os.environ.get("ANTHROPIC_API_KEY", "")
ANTHROPIC_MODEL = os.environ.get("ANTHROPIC_MODEL", "claude-sonnet-5-5")
ANTHROPIC_BASE_URL = os.environ.get("ANTHROPIC_BASE_URL", "")
OPENAI_API_KEY = os.environ.get("OPENAI_API_KEY", "")
OPENAI_MODEL = os.environ.get("OPENAI_MODEL", "gpt-4.1")
OPENAI_BASE_URL = os.environ.get("OPENAI_BASE_URL", "")
PLANNER_MAX_TOKENS = int(os.environ.get("PLANNER_MAX_TOKENS", "1024"))
PLANNER_TIMEOUT_SECONDS = _env_float("PLANNER_TIMEOUT_SECONDS", 60.0)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# `manage.py collectstatic` (make run does it) fills this; WhiteNoise serves it.
STATIC_ROOT = Path(os.environ.get("DJANGO_STATIC_ROOT", "") or BASE_DIR / "var" / "staticfiles")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

# Error pages (DEBUG) and error reports leave out every credential-bearing setting, local
# variable and request header: connection URLs carry passwords (agentops/errors.py).
DEFAULT_EXCEPTION_REPORTER_FILTER = "agentops.errors.CredentialFilter"

# Login throttling (django-axes): after LOGIN_FAILURE_LIMIT failed logins from one address,
# that address may not log in for LOGIN_LOCKOUT_MINUTES (a success resets the count). The
# address is the peer's, or with DJANGO_BEHIND_PROXY what the proxy saw (agentops/access.py).
AXES_FAILURE_LIMIT = int(os.environ.get("LOGIN_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = timedelta(minutes=_env_float("LOGIN_LOCKOUT_MINUTES", 15.0))
AXES_LOCKOUT_PARAMETERS = ["ip_address"]
AXES_CLIENT_IP_CALLABLE = "agentops.access.client_ip"
AXES_RESET_ON_SUCCESS = True
# The lockout says for how long, and what to do (templates/429.html).
AXES_LOCKOUT_TEMPLATE = "429.html"

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "operators:tasks"
LOGOUT_REDIRECT_URL = "login"
# How long a customer's payment link (agentops/customers) stays valid.
CUSTOMER_LINK_MAX_AGE_DAYS = int(os.environ.get("CUSTOMER_LINK_MAX_AGE_DAYS", "30"))
# How often a customer may press "Try paying again" (agentops/customers/services.py): at
# most CUSTOMER_RETRY_LIMIT new attempts per invoice (at least 1) in any
# CUSTOMER_RETRY_WINDOW_SECONDS; then 429, saying when. Counted in PostgreSQL (the renewals
# the customer started) under the invoice's lock, so it holds across processes and machines;
# a link names one invoice, so it bounds each link too. An operator's retry from the task
# page is permissioned and recorded with their name instead, and is not counted.
CUSTOMER_RETRY_LIMIT = int(os.environ.get("CUSTOMER_RETRY_LIMIT", "3"))
CUSTOMER_RETRY_WINDOW_SECONDS = int(os.environ.get("CUSTOMER_RETRY_WINDOW_SECONDS", "3600"))
# Where customers open their payment page, for the link in their emails (receipt, payment
# failed, itinerary); empty: AGENTOPS_BASE_URL.
CUSTOMER_BASE_URL = os.environ.get("CUSTOMER_BASE_URL", "").rstrip("/")
# Who the customer's page says they are paying, and how to reach them (an expired link, a
# question): shown on every customer page.
MERCHANT_NAME = os.environ.get("MERCHANT_NAME", "agentops demo shop")
MERCHANT_EMAIL = os.environ.get("MERCHANT_EMAIL", "billing@example.com")
MERCHANT_PHONE = os.environ.get("MERCHANT_PHONE", "")

# The HTTP API for other programs (agentops/api). Requests a client's token may make per
# minute, counted in PostgreSQL on the client's own row (a fixed window by the database's
# clock), so it holds across gunicorn workers and machines; then 429 with Retry-After.
API_RATE_LIMIT = int(os.environ.get("API_RATE_LIMIT", "120"))
# How long an Idempotency-Key and the first answer to it are kept: a retry with the key
# within this gets that answer replayed; after it, the key starts afresh.
API_IDEMPOTENCY_TTL_SECONDS = int(os.environ.get("API_IDEMPOTENCY_TTL_SECONDS", "86400"))

# Notifications out (agentops/notifications, README "Notifications"): NOTIFY_URL is told, by a
# signed JSON POST, of each event in NOTIFY_EVENTS. Empty: nothing is sent, nor recorded.
NOTIFY_URL = os.environ.get("NOTIFY_URL", "").strip()
# The HMAC-SHA256 key of the Agentops-Signature header; required when NOTIFY_URL is set.
NOTIFY_SECRET = os.environ.get("NOTIFY_SECRET", "")
NOTIFY_EVENTS = tuple(
    e.strip()
    for e in os.environ.get(
        "NOTIFY_EVENTS", "needs_human,awaiting_approval,finished,compensated"
    ).split(",")
    if e.strip()
)
# How long the receiver remembers an Idempotency-Key; a delivery is retried (same key) only
# within 90 % of it, counted from the event.
NOTIFY_KEY_LIFETIME_SECONDS = _env_float("NOTIFY_KEY_LIFETIME_SECONDS", 24 * 3600.0)
# Seconds before each retry of a delivery whose answer was not a 2xx or a refusal; the last
# repeats until the key's life ends.
NOTIFY_RETRY_SCHEDULE = tuple(
    float(s)
    for s in os.environ.get("NOTIFY_RETRY_SCHEDULE", "5,30,120,600,1800,3600").split(",")
    if s.strip()
)
NOTIFY_TIMEOUT_SECONDS = _env_float("NOTIFY_TIMEOUT_SECONDS", 5.0)

# The provider audit (agentops/audit, README "The provider audit"). Each provider an app
# declares an audit for is audited this often, through RQ's scheduler (0: only by hand,
# `manage.py audit_providers`), over the effects of this far back (each audit overlaps the
# last: what a provider shows late is still seen).
AUDIT_INTERVAL_SECONDS = _env_float("AUDIT_INTERVAL_SECONDS", 24 * 3600.0)
AUDIT_WINDOW_SECONDS = _env_float("AUDIT_WINDOW_SECONDS", 2 * 24 * 3600.0)
# How often the sweeper asks each provider who answers (a provider that can say: the
# sandboxes); a new run at the same address is a restart, audited at once (0: never asked).
AUDIT_RESTART_CHECK_SECONDS = _env_float("AUDIT_RESTART_CHECK_SECONDS", 60.0)

# The journal's retention (docs/design.md §17, README "Retention"). Tasks, steps and entries are
# partitioned by when each task was made, in ranges this wide, made this many ranges ahead; a
# range whose tasks are all over and untouched this long after it ended is dropped whole, by
# a job the sweeper rings this often (0: never; `manage.py journal_retain` by hand). A keep of
# 0 keeps the journal for good. What the guards need for good (which objects have a standing
# once-only effect, with its evidence) is never dropped. Width, ahead and keep are written to
# the database by `migrate`, as the tables' owner: the app's role cannot shorten the keep.
JOURNAL_PARTITION_SECONDS = _env_float("JOURNAL_PARTITION_SECONDS", 7 * 24 * 3600.0)
JOURNAL_PARTITIONS_AHEAD = int(os.environ.get("JOURNAL_PARTITIONS_AHEAD", "4"))
JOURNAL_RETAIN_SECONDS = _env_float("JOURNAL_RETAIN_SECONDS", 90 * 24 * 3600.0)
JOURNAL_RETENTION_INTERVAL_SECONDS = _env_float("JOURNAL_RETENTION_INTERVAL_SECONDS", 24 * 3600.0)
# Where the job writes each range before it drops it (journal-<range>.jsonl.gz), if anywhere.
JOURNAL_ARCHIVE_DIR = os.environ.get("JOURNAL_ARCHIVE_DIR", "")

# The MCP server (agentops/mcp, `manage.py mcp_server`). How long an intent's call waits for its
# task to settle the effect before it answers with what is known (unknown, and being checked).
MCP_WAIT_SECONDS = _env_float("MCP_WAIT_SECONDS", 10.0)
# On stdio, the API client (with the `mcp` scope) every call is made as.
MCP_CLIENT = os.environ.get("MCP_CLIENT", "")
# Streamable HTTP: loopback unless said otherwise.
MCP_HOST = os.environ.get("MCP_HOST", "127.0.0.1")
MCP_PORT = int(os.environ.get("MCP_PORT", "8765"))

# A client's X-Forwarded-Proto is believed only when an operator says a proxy is in front
# (one that sets the header itself and drops what clients send). The gunicorn settings
# (agentops/gunicorn_conf.py) read the same variable.
BEHIND_PROXY = _env_bool("DJANGO_BEHIND_PROXY", False)
if BEHIND_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Off only for `make run`, which serves plain HTTP on this machine's loopback.
HTTPS = _env_bool("DJANGO_HTTPS", True)
LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "[::1]"}
if not DEBUG and HTTPS:
    # Production: `manage.py check --deploy` is clean with these.
    SECURE_SSL_REDIRECT = _env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = int(os.environ.get("DJANGO_HSTS_SECONDS", "31536000"))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
elif not DEBUG and not set(ALLOWED_HOSTS) <= LOOPBACK_HOSTS:
    raise ImproperlyConfigured(
        "DJANGO_HTTPS=0 serves plain HTTP and is allowed only for loopback hosts "
        f"({', '.join(sorted(LOOPBACK_HOSTS))}), not DJANGO_ALLOWED_HOSTS={ALLOWED_HOSTS}"
    )

# Logs (agentops/logs.py): one JSON object per line, each line about a step naming its task,
# key, tool and state; `make run` sets LOG_FORMAT=text for its terminal.
LOG_FORMAT = os.environ.get("LOG_FORMAT", "") or "json"
LOG_LEVEL = os.environ.get("LOG_LEVEL", "") or "INFO"
try:
    LOGGING = logging_config(fmt=LOG_FORMAT, level=LOG_LEVEL)
except LogFormatRefused as refused:
    raise ImproperlyConfigured(str(refused)) from None

# Metrics (agentops/telemetry): /metrics is served without a token only to these addresses or
# networks (as agentops.access.client_ip sees the caller); anyone else needs an API client's
# token with the scope metrics:read. PROMETHEUS_MULTIPROC_DIR, read by prometheus_client
# itself, must be set in the environment of every process (README, "Operating agentops").
METRICS_ALLOWED_ADDRESSES = [
    a.strip()
    for a in os.environ.get("METRICS_ALLOWED_ADDRESSES", "127.0.0.1,::1").split(",")
    if a.strip()
]
try:
    METRICS_ALLOWED_NETWORKS = [ip_network(a, strict=False) for a in METRICS_ALLOWED_ADDRESSES]
except ValueError as bad:
    raise ImproperlyConfigured(f"METRICS_ALLOWED_ADDRESSES: {bad}") from None
# Where people open the operators' pages (https://ops.example.com): the alerts link there
# (exposed as agentops_info{base_url}).
AGENTOPS_BASE_URL = os.environ.get("AGENTOPS_BASE_URL", "").rstrip("/")
