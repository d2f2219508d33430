"""agentops settings: every value Django's settings take from the environment is read here, once.

Each variable (here, and in gunicorn's configuration and the few a library or a tool reads
itself) is declared where it is read, with its kind, default and meaning
(agentops/conf.py); docs/settings.md is written from those declarations
(`python -m devtools.settings_table --write docs/settings.md`). Defaults suit the demo
(`make run`), which points DATABASE_URL and REDIS_URL at the embedded servers it starts.
"""

from __future__ import annotations

from datetime import timedelta
from ipaddress import ip_network
from pathlib import Path

from django.core.checks.security.base import (
    SECRET_KEY_INSECURE_PREFIX,
    SECRET_KEY_MIN_LENGTH,
    SECRET_KEY_MIN_UNIQUE_CHARACTERS,
)
from django.core.exceptions import ImproperlyConfigured

from agentops import shared_settings
from agentops.conf import Section
from agentops.database_url import database_settings
from agentops.logs import LogFormatRefused, logging_config
from agentops.version import running_version

BASE_DIR = Path(__file__).resolve().parent.parent


_web = shared_settings.WEB
_apps = Section("Apps")
_data = Section("The database and Redis")
_running = Section("Running tasks")
_tools = shared_settings.TOOLS
_planners = Section("Planners")
_customers = Section("Customers and the HTTP API")
_notify = Section("Notifications")
_audit = Section("The provider audit")
_retention = Section("Retention")
_mcp = Section("The MCP server")
_logs = shared_settings.LOGS

DEBUG = _web.flag(
    "DJANGO_DEBUG",
    False,
    "Django debug mode, for development only. Off means production settings.",
    shown="off (the tests turn it on unless you set it)",
)


def _weak_secret(key: str) -> str:
    """Why `key` is too weak to sign sessions and CSRF tokens with (Django's own bar)."""
    if len(key) < SECRET_KEY_MIN_LENGTH:
        return f"it has {len(key)} characters, fewer than {SECRET_KEY_MIN_LENGTH}"
    if len(set(key)) < SECRET_KEY_MIN_UNIQUE_CHARACTERS:
        return f"it has fewer than {SECRET_KEY_MIN_UNIQUE_CHARACTERS} distinct characters"
    if key.startswith(SECRET_KEY_INSECURE_PREFIX):
        return "it is a key Django generated for development"
    return ""


SECRET_KEY = _web.text(
    "DJANGO_SECRET_KEY",
    "",
    "Required when `DJANGO_DEBUG` is off, and refused if weak (under 50 characters, under 5 "
    "distinct ones, or `django-insecure-…`).",
    shown="`make run`: generated once into `var/secrets/`",
    kind="secret",
)
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

ALLOWED_HOSTS = _web.names(
    "DJANGO_ALLOWED_HOSTS",
    ("localhost", "127.0.0.1"),
    "Comma-separated host names the app answers to.",
)
CSRF_TRUSTED_ORIGINS = _web.names(
    "DJANGO_CSRF_TRUSTED_ORIGINS",
    (),
    "Comma-separated origins (`https://ops.example.com`) trusted for CSRF, e.g. behind a proxy.",
)

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
if _apps.flag(
    "AGENTOPS_EXAMPLES",
    False,
    "Install the example app (`examples.support`, the `goodwill` kind) too.",
    shown="off (`make run` and the tests: on)",
):
    INSTALLED_APPS.append("examples.support")
# Your own apps (docs/your-own/tools-and-kinds.md, "Your own app"): their dotted names,
# comma-separated, each an importable package with an effects.py (found as admin.py is). An
# environment variable rather than a settings module of your own: every process the launcher starts
# (the web server, the workers, the sweeper, `stack.py manage`) reads the same environment, ours
# stays the one settings module, and a tool's own settings may be read from the environment too
# (agentops.effects.tool_setting).
AGENTOPS_APPS = _apps.names(
    "AGENTOPS_APPS",
    (),
    "Your own apps, installed after agentops' own: their dotted names, comma-separated "
    "(`giftcards,myco.returns`), each importable (on `PYTHONPATH`) with an `effects.py`. A "
    "name that is not a dotted name stops the start with a sentence.",
    shown="none",
)
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
if _apps.flag(
    "AGENTOPS_DEVTOOLS",
    False,
    "`1` installs the development tools' Django app (`devtools`), whose commands are "
    "`manage.py chaos` and `manage.py bench`; the launcher's `chaos` and `bench` commands set "
    "it. Never set in production.",
):
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
    # A view that lost its database (a failover) answers 503 with a sentence, not a 500
    # (agentops/unavailable.py; a middleware's such error goes through handler500).
    "agentops.unavailable.DatabaseUnavailableMiddleware",
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
DATABASE_URL = _data.text(
    "DATABASE_URL",
    "",
    "PostgreSQL as this process connects to it, `postgres://user:pass@host:port/db`: its "
    "kind's role, which owns nothing. The app refuses to start without it. A primary that "
    "fails over: name every node, `postgres://user:pass@a:5432,b:5432/db"
    "?target_session_attrs=read-write` (libpq keeps the one that takes writes).",
    shown="started by `make run` / `make test` (the web server as `agentops_web`, the workers "
    "and the sweeper as `agentops_worker`; `make test`, `stack.py manage` and the launcher's "
    "own steps as `agentops_app`, which is both)",
    kind="url",
)
if not DATABASE_URL:
    raise ImproperlyConfigured(
        "DATABASE_URL is not set. `make run` and `make test` start an embedded PostgreSQL and "
        "set it for you; to use your own server, export DATABASE_URL=postgres://user:pass@host/db"
    )
# One host, or several (a primary that fails over: docs/operating/many-machines.md).
DATABASES = {"default": database_settings(DATABASE_URL, conn_max_age=60)}
# A server that stops answering without closing the connection (its host cut off, or dead
# without a reset) is given up after this long, so that the next connection finds the new
# primary rather than waiting as long as TCP would: libpq's keepalives and TCP_USER_TIMEOUT,
# unless DATABASE_URL sets its own.
DATABASE_SILENCE_SECONDS = _data.seconds(
    "DATABASE_SILENCE_SECONDS",
    10.0,
    "How long a connection waits on a database server that answers nothing (a partition, a "
    "host that died) before it is given up: keepalives probe an idle one, and data sent stays "
    "unacknowledged no longer (`TCP_USER_TIMEOUT`). `0`: as the operating system does "
    "(minutes). A `keepalives…` or `tcp_user_timeout` in `DATABASE_URL` wins.",
)
if DATABASE_SILENCE_SECONDS > 0:
    _silence = DATABASE_SILENCE_SECONDS
    for _name, _value in {
        "keepalives": 1,
        "keepalives_idle": max(1, int(_silence / 3)),
        "keepalives_interval": max(1, int(_silence / 6)),
        "keepalives_count": 3,
        "tcp_user_timeout": int(_silence * 1000),
    }.items():
        DATABASES["default"].setdefault("OPTIONS", {}).setdefault(_name, _value)
# The role that owns the tables and runs migrations (agentops/dbroles.py). Give it only to
# `manage.py migrate`: every other process connects as DATABASE_URL's role, which owns
# nothing and may write the journal only through the functions its kind of process calls.
DATABASE_OWNER_URL = _data.text(
    "DATABASE_OWNER_URL",
    "",
    "The role that owns the tables; `manage.py migrate` connects as it (the `owner` "
    "connection) and then grants each role of `DATABASE_ROLES` what `agentops/dbroles.py` and "
    "`journal/callers.py` list. Give it to `migrate` only. Unset: one role does everything, "
    "and the database holds no rule against the app.",
    shown="started by `make run` / `make test` (role `agentops_owner`)",
    kind="url",
)
if DATABASE_OWNER_URL:
    DATABASES["owner"] = database_settings(DATABASE_OWNER_URL, conn_max_age=0)


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
    _data.text(
        "DATABASE_ROLES",
        "agentops_web=people,agentops_worker=runner",
        "Each app role and the kinds of process that connect as it: `people` (the web server, "
        "the HTTP API, the MCP server) or `runner` (the workers and the sweeper). `migrate` "
        "grants each exactly what its kinds may do; a process whose `DATABASE_URL` role is "
        "none of these fails `manage.py check` (agentops.E010).",
        shown="`agentops_web=people,agentops_worker=runner` (`make run` and `make test` add "
        "`agentops_app=people+runner`)",
    )
)
DATABASE_ROUTERS = ["agentops.dbroles.MigrationRouter"]
for _alias, _db in DATABASES.items():
    if _db["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured("agentops needs PostgreSQL (its journal relies on triggers)")

DATABASE_RETRY_AFTER_SECONDS = _data.seconds(
    "DATABASE_RETRY_AFTER_SECONDS",
    10,
    "While the database cannot be reached or is not the primary (a failover), the pages and "
    "the HTTP API answer 503 with `Retry-After` set to this; about the time a failover takes "
    "(Patroni's `ttl`).",
)

# Redis is only a doorbell: losing it loses no work (docs/design.md §4).
REDIS_URL = _data.text(
    "REDIS_URL",
    "redis://127.0.0.1:6379/0",
    "Redis for the RQ job queue, `redis://:password@host:port/db`.",
    shown="started by `make run` / `make test`, with a password (the app alone: "
    "`redis://127.0.0.1:6379/0`)",
    kind="url",
)
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
    # One process runs job after job (no fork per job): see docs/concepts.md, "Workers". It runs
    # only agentops' own jobs, read as JSON (agentops/workers.py).
    "WORKER_CLASS": "agentops.workers.AgentopsWorker",
    "JOB_CLASS": "agentops.workers.AgentopsJob",
}
# django-rq's pages in the admin check only is_staff; ours are at /django-rq/ behind a
# permission (agentops/urls.py).
RQ_SHOW_ADMIN_LINK = False

# Running tasks (agentops/runner.py).
PLANNER = _running.text(
    "PLANNER",
    "scripted",
    "Who decides each next step: `scripted` (the demo playbooks), `anthropic` or `openai`.",
)
# Seconds before each reconciliation round of an unknown step (journal Policy); when they
# are used up the task needs a human. The default reaches past Stripe's search lag.
RECONCILE_SCHEDULE = _running.seconds_list(
    "RECONCILE_SCHEDULE",
    (1.0, 2.0, 5.0, 15.0, 30.0, 60.0, 120.0),
    "Seconds before each reconciliation round of an unknown step; when they are used up, the "
    "task needs a human.",
)
# Seconds before each harness retry of a step that did not happen for a passing reason (the
# provider could not be reached); when they are used up the planner decides with the facts.
TRANSIENT_RETRY_SCHEDULE = _running.seconds_list(
    "TRANSIENT_RETRY_SCHEDULE",
    (1.0, 5.0, 30.0),
    "Seconds before each harness retry of a step the provider could not take (connection "
    "refused: nothing was sent); then the planner decides, or, for a name that never resolves "
    "or a certificate that never verifies, an operator.",
)
# Runs in a row that may end without finishing cleanly (a crashed worker, a lost database)
# before the task is handed to a human instead of being run again.
MAX_FAILED_RUNS = _running.integer(
    "MAX_FAILED_RUNS",
    5,
    "Runs of a task in a row that may end without finishing cleanly (a killed worker, a lost "
    "database) before it needs a human.",
)
# How long a saga held for a person's approval may wait for the decision (and then for its
# use) before the request expires and the saga asks again: a weekend, and a day.
APPROVAL_TTL_SECONDS = _running.seconds(
    "APPROVAL_TTL_SECONDS",
    3 * 24 * 3600.0,
    "How long a saga held for an operator's approval may wait for the decision before the "
    "request expires and the saga asks again.",
    shown="`259200` (3 days)",
)
RUN_JOB_TIMEOUT_SECONDS = _running.integer(
    "RUN_JOB_TIMEOUT_SECONDS", 600, "RQ's limit on one run of a task (many steps), in seconds."
)
SWEEP_INTERVAL_SECONDS = _running.seconds(
    "SWEEP_INTERVAL_SECONDS", 5.0, "How often the sweeper looks for runnable tasks nobody runs."
)
# A task enqueued this recently is not enqueued again by the sweeper (the doorbell's echo).
SWEEP_GRACE_SECONDS = _running.seconds(
    "SWEEP_GRACE_SECONDS",
    30.0,
    "A task rung for this recently is not rung again by the sweeper.",
    shown="`30` (tests: `1`)",
)
# A task the sweeper rang for that no run has taken since is rung again after a pause that
# doubles from SWEEP_GRACE_SECONDS up to this: a queue that waits for stalled workers does not
# fill with copies of one run, and a lost job is still found again.
SWEEP_BACKOFF_MAX_SECONDS = _running.seconds(
    "SWEEP_BACKOFF_MAX_SECONDS",
    600.0,
    "A task the sweeper rang for that no run has taken since (stalled workers, a lost job) is "
    "rung again after a pause that doubles from `SWEEP_GRACE_SECONDS` up to this.",
)
# Wrappers the runner's tools go through (agentops.tools.tools_wrapped), as dotted paths,
# comma-separated. None in production: the chaos run arms its workers with a fault
# (devtools.chaos.kill), and nothing else is meant to be here.
TOOL_WRAPPERS = _running.names(
    "AGENTOPS_TOOL_WRAPPERS",
    (),
    "Dotted paths, comma-separated, of wrappers the runner's tools go through "
    "(`agentops.tools.tools_wrapped`). Empty in production; the chaos run and the worker tests "
    "arm a worker with `devtools.chaos.kill.dying`.",
)
# Wrappers the planner goes through (agentops.planners.planner_get), the same way. None in
# production: the chaos run gives its workers a model that slips (devtools.chaos.model).
PLANNER_WRAPPERS = _running.names(
    "AGENTOPS_PLANNER_WRAPPERS",
    (),
    "Dotted paths, comma-separated, of wrappers the planner goes through "
    "(`agentops.planners.planner_get`). Empty in production; the chaos run gives its safe "
    "harness's workers `devtools.chaos.model.misbehaving`.",
)

# The journal (see journal/README.md). A task's lease lasts this long past its holder's last
# journal write; it must exceed the longest tool call, so a live runner never loses it.
JOURNAL_LEASE_SECONDS = _running.seconds(
    "JOURNAL_LEASE_SECONDS",
    60.0,
    "How long a task's lease lasts past its holder's last journal write. It must exceed the "
    "longest tool call or lookup (a system check refuses it otherwise); before asking a model "
    "the runner stretches it by the planner's worst case. The app's database sessions also "
    "end when idle inside a transaction this long (a worker stopped mid-write would otherwise "
    "keep its task's row locked).",
    shown="`60` (tests: `2`)",
)
# The journal's per-step statements are prepared on the server (journal/db.py): parsed and
# planned once per connection. Off only behind a pooler in transaction mode that cannot keep
# a session's prepared statements (PgBouncer before 1.21).
JOURNAL_PREPARED_STATEMENTS = _running.flag(
    "JOURNAL_PREPARED_STATEMENTS",
    True,
    "The journal's per-step statements are prepared on the server, parsed and planned once "
    "per connection. Off only behind a pooler in transaction mode that cannot keep a "
    "session's prepared statements (PgBouncer before 1.21).",
)


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
TOOL_TIMEOUT_SECONDS = _tools.seconds(
    "TOOL_TIMEOUT_SECONDS",
    5.0,
    "How long a tool call waits for its provider before its outcome is `unknown`; a lookup "
    "gets the same time for all its requests.",
)
TOOL_TIMEOUTS = _tools.seconds_by_name(
    "TOOL_TIMEOUTS", "Per-tool overrides, e.g. `charge_customer=8,send_email=3`."
)
STRIPE_API_KEY = _tools.text(
    "STRIPE_API_KEY", "", "Stripe secret key (`sk_test_…` for test mode).", kind="secret"
)
STRIPE_API_BASE = _tools.text(
    "STRIPE_API_BASE",
    "",
    "Address of a Stripe-compatible API, e.g. the sandbox.",
    shown="empty (= the real Stripe)",
    kind="url",
)
STRIPE_WEBHOOK_SECRET = _tools.text(
    "STRIPE_WEBHOOK_SECRET",
    "",
    "The endpoint's signing secret (`whsec_…`); `POST /webhooks/stripe` verifies every event "
    "with it, and the worker that applies it verifies it again.",
    shown="empty (webhooks refused)",
    kind="secret",
)
# A web server given no secret at all, on purpose: it stores every well-formed, signed event,
# and only the workers (which have STRIPE_WEBHOOK_SECRET) verify and apply them, so even a
# web server taken over cannot sign one (commerce/webhooks.py). Off: a web server without the
# secret refuses every event, saying so.
STRIPE_WEBHOOK_CHECKED_BY_WORKERS = _tools.flag(
    "STRIPE_WEBHOOK_CHECKED_BY_WORKERS",
    False,
    "`1`: the web server holds no webhook secret; it stores every well-formed signed event, "
    "and the workers (which hold `STRIPE_WEBHOOK_SECRET`) verify and apply it.",
)
STRIPE_KEY_LIFETIME_SECONDS = _tools.seconds(
    "STRIPE_KEY_LIFETIME_SECONDS",
    24 * 3600.0,
    "How long Stripe remembers idempotency keys; retries happen only within 90% of it.",
)
STRIPE_SEARCH_LAG_SECONDS = _tools.seconds(
    "STRIPE_SEARCH_LAG_SECONDS",
    60.0,
    "How long Stripe's search may trail writes; a dead-key lookup keeps looking this long.",
)
STRIPE_MAX_NETWORK_RETRIES = _tools.integer(
    "STRIPE_MAX_NETWORK_RETRIES",
    0,
    "The stripe library's own retries (same key). Leave at 0 so the journal sees every "
    'attempt; above 0, a refused connection can no longer prove "not done".',
)
MAIL_API_BASE = _tools.text(
    "MAIL_API_BASE",
    "",
    "The mail provider's API (the sandbox's `python -m sandbox.mail`).",
    kind="url",
)
MAIL_API_KEY = _tools.text("MAIL_API_KEY", "", "The mail provider's API key.", kind="secret")
MAIL_KEY_LIFETIME_SECONDS = _tools.seconds(
    "MAIL_KEY_LIFETIME_SECONDS",
    24 * 3600.0,
    "How long the mail provider remembers idempotency keys.",
)
BOOKINGS_API_BASE = _tools.text(
    "BOOKINGS_API_BASE",
    "",
    "The bookings provider's API (the sandbox's `python -m sandbox.bookings`).",
    kind="url",
)
BOOKINGS_API_KEY = _tools.text(
    "BOOKINGS_API_KEY", "", "The bookings provider's API key.", kind="secret"
)
BOOKINGS_KEY_LIFETIME_SECONDS = _tools.seconds(
    "BOOKINGS_KEY_LIFETIME_SECONDS",
    24 * 3600.0,
    "How long the bookings provider remembers idempotency keys.",
)
SUPPORT_API_BASE = _tools.text(
    "SUPPORT_API_BASE",
    "",
    "The example app's support provider (`python -m examples.support.sandbox`).",
    shown="empty (`make run`: its sandbox)",
    kind="url",
)
SUPPORT_KEY_LIFETIME_SECONDS = _tools.seconds(
    "SUPPORT_KEY_LIFETIME_SECONDS",
    24 * 3600.0,
    "How long the support provider remembers idempotency keys.",
)

# Planners (agentops/planners/): the model adapters. An empty *_BASE_URL means the vendor's
# own API; set it to any compatible server (for OpenAI: vLLM, Ollama, a gateway, ...).
ANTHROPIC_API_KEY = _planners.text(
    "ANTHROPIC_API_KEY", "", "API key of the `anthropic` planner.", kind="secret"
)
ANTHROPIC_MODEL = _planners.text(
    "ANTHROPIC_MODEL", "claude-sonnet-5-5", "Model the `anthropic` planner asks."
)
ANTHROPIC_BASE_URL = _planners.text(
    "ANTHROPIC_BASE_URL",
    "",
    "Address of an Anthropic-compatible Messages API.",
    shown="empty (= the real Anthropic API)",
    kind="url",
)
OPENAI_API_KEY = _planners.text(
    "OPENAI_API_KEY", "", "API key of the `openai` planner.", kind="secret"
)
OPENAI_MODEL = _planners.text("OPENAI_MODEL", "gpt-4.1", "Model the `openai` planner asks.")
OPENAI_BASE_URL = _planners.text(
    "OPENAI_BASE_URL",
    "",
    "Address of any OpenAI-compatible Chat Completions server, e.g. `http://localhost:8000/v1`.",
    shown="empty (= the real OpenAI API)",
    kind="url",
)
PLANNER_MAX_TOKENS = _planners.integer(
    "PLANNER_MAX_TOKENS", 1024, "Most tokens a planner lets the model answer with."
)
PLANNER_TIMEOUT_SECONDS = _planners.seconds(
    "PLANNER_TIMEOUT_SECONDS",
    60.0,
    "How long a planner waits for the model (the SDK retries twice: a model call has no side "
    "effects).",
)

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
STATIC_ROOT = Path(
    _web.text(
        "DJANGO_STATIC_ROOT",
        "",
        "Where `collectstatic` puts the static files WhiteNoise serves.",
        shown="`var/staticfiles`",
        kind="path",
    )
    or BASE_DIR / "var" / "staticfiles"
)
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
AXES_FAILURE_LIMIT = _web.integer(
    "LOGIN_FAILURE_LIMIT", 5, "Failed logins from one address before it is locked out."
)
AXES_COOLOFF_TIME = timedelta(
    minutes=_web.number(
        "LOGIN_LOCKOUT_MINUTES", 15.0, "How long (minutes) a locked-out address may not log in."
    )
)
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
CUSTOMER_LINK_MAX_AGE_DAYS = _customers.integer(
    "CUSTOMER_LINK_MAX_AGE_DAYS", 30, "How many days a customer's payment-page link stays valid."
)
# How often a customer may press "Try paying again" (agentops/customers/services.py): at
# most CUSTOMER_RETRY_LIMIT new attempts per invoice (at least 1) in any
# CUSTOMER_RETRY_WINDOW_SECONDS; then 429, saying when. Counted in PostgreSQL (the renewals
# the customer started) under the invoice's lock, so it holds across processes and machines;
# a link names one invoice, so it bounds each link too. An operator's retry from the task
# page is permissioned and recorded with their name instead, and is not counted.
CUSTOMER_RETRY_LIMIT = _customers.integer(
    "CUSTOMER_RETRY_LIMIT",
    3,
    "How many times a customer may try paying an invoice again from its page within "
    "`CUSTOMER_RETRY_WINDOW_SECONDS` (a refused card counts); then 429, saying when.",
)
CUSTOMER_RETRY_WINDOW_SECONDS = _customers.integer(
    "CUSTOMER_RETRY_WINDOW_SECONDS", 3600, "The window of `CUSTOMER_RETRY_LIMIT`, in seconds."
)
# Where customers open their payment page, for the link in their emails (receipt, payment
# failed, itinerary); empty: AGENTOPS_BASE_URL.
CUSTOMER_BASE_URL = _customers.text(
    "CUSTOMER_BASE_URL",
    "",
    "Where customers open their payment page (`https://pay.example.com`): put before the "
    "link in the receipt, payment-failed and itinerary emails. With neither set, the emails "
    "carry the path alone.",
    shown="empty (= `AGENTOPS_BASE_URL`)",
    kind="url",
).rstrip("/")
# Who the customer's page says they are paying, and how to reach them (an expired link, a
# question): shown on every customer page.
MERCHANT_NAME = _customers.text(
    "MERCHANT_NAME", "agentops demo shop", "Who the customer's pages say they are paying."
)
MERCHANT_EMAIL = _customers.text(
    "MERCHANT_EMAIL",
    "billing@example.com",
    "The contact every customer's page gives (a question, a new link).",
)
MERCHANT_PHONE = _customers.text(
    "MERCHANT_PHONE",
    "",
    "A phone number the customer's pages give beside the email, when set.",
)

# The HTTP API for other programs (agentops/api). Requests a client's token may make per
# minute, counted in PostgreSQL on the client's own row (a fixed window by the database's
# clock), so it holds across gunicorn workers and machines; then 429 with Retry-After.
API_RATE_LIMIT = _customers.integer(
    "API_RATE_LIMIT",
    120,
    "Requests one HTTP API client's token may make per minute (a fixed window by "
    "PostgreSQL's clock, across all workers); then 429 with `Retry-After`.",
)
# How long an Idempotency-Key and the first answer to it are kept: a retry with the key
# within this gets that answer replayed; after it, the key starts afresh.
API_IDEMPOTENCY_TTL_SECONDS = _customers.integer(
    "API_IDEMPOTENCY_TTL_SECONDS",
    86400,
    "How long an HTTP API client's `Idempotency-Key` and the first answer to it are kept; a "
    "retry with the key within this gets that answer replayed, after it the key starts "
    "afresh.",
)

# Notifications out (agentops/notifications, docs/operating/notifications.md): NOTIFY_URL is told,
# by a signed JSON POST, of each event in NOTIFY_EVENTS. Empty: nothing is sent, nor recorded.
NOTIFY_URL = _notify.text(
    "NOTIFY_URL",
    "",
    "Your endpoint, told by a signed JSON `POST` of each event of `NOTIFY_EVENTS` "
    '("Notifications").',
    shown="empty (nothing sent, nothing recorded)",
    kind="url",
).strip()
# The HMAC-SHA256 key of the Agentops-Signature header; required when NOTIFY_URL is set.
NOTIFY_SECRET = _notify.text(
    "NOTIFY_SECRET",
    "",
    "The key of the `Agentops-Signature` HMAC, which your endpoint checks. Required with "
    "`NOTIFY_URL`: agentops refuses to start with the address and no secret.",
    kind="secret",
)
NOTIFY_EVENTS = tuple(
    _notify.names(
        "NOTIFY_EVENTS",
        ("needs_human", "awaiting_approval", "finished", "compensated"),
        "Which status changes are sent.",
    )
)
# How long the receiver remembers an Idempotency-Key; a delivery is retried (same key) only
# within 90 % of it, counted from the event.
NOTIFY_KEY_LIFETIME_SECONDS = _notify.seconds(
    "NOTIFY_KEY_LIFETIME_SECONDS",
    24 * 3600.0,
    "How long your endpoint keeps the `Idempotency-Key`s it acted on; a notification is sent "
    "again only within 90 % of it, counted from the event.",
)
# Seconds before each retry of a delivery whose answer was not a 2xx or a refusal; the last
# repeats until the key's life ends.
NOTIFY_RETRY_SCHEDULE = _notify.seconds_list(
    "NOTIFY_RETRY_SCHEDULE",
    (5.0, 30.0, 120.0, 600.0, 1800.0, 3600.0),
    "Seconds before each new attempt of a notification whose answer was not 2xx or a refusal "
    "(or that could not be sent); the last repeats while the key is trusted.",
)
NOTIFY_TIMEOUT_SECONDS = _notify.seconds(
    "NOTIFY_TIMEOUT_SECONDS",
    5.0,
    "How long an attempt waits to connect, and then for the answer, before its outcome is "
    "`unknown`.",
)

# The provider audit (agentops/audit, docs/operating/audit.md). Each provider an app
# declares an audit for is audited this often, through RQ's scheduler (0: only by hand,
# `manage.py audit_providers`), over the effects of this far back (each audit overlaps the
# last: what a provider shows late is still seen).
AUDIT_INTERVAL_SECONDS = _audit.seconds(
    "AUDIT_INTERVAL_SECONDS",
    24 * 3600.0,
    "How often each provider's records are audited against the journal, through RQ's "
    'scheduler ("The provider audit"); `0`: only by hand (`manage.py audit_providers`).',
    shown="`86400` (tests: `0`)",
)
AUDIT_WINDOW_SECONDS = _audit.seconds(
    "AUDIT_WINDOW_SECONDS",
    2 * 24 * 3600.0,
    "How far back each scheduled audit, and each after a provider's restart, looks. At least "
    "`AUDIT_INTERVAL_SECONDS` (a system check refuses less).",
    shown="`172800` (2 days)",
)
# How often the sweeper asks each provider who answers (a provider that can say: the
# sandboxes); a new run at the same address is a restart, audited at once (0: never asked).
AUDIT_RESTART_CHECK_SECONDS = _audit.seconds(
    "AUDIT_RESTART_CHECK_SECONDS",
    60.0,
    "How often the sweeper asks each provider which run of it answers (the sandboxes can "
    "say); a new one at the same address is a restart, audited at once. `0`: never asked.",
    shown="`60` (tests: `0`)",
)

# The journal's retention (docs/design.md §17, docs/operating/retention.md). Tasks, steps and
# entries are partitioned by when each task was made, in ranges this wide, made this many ranges
# ahead; a range whose tasks are all over and untouched this long after it ended is dropped whole,
# by a job the sweeper rings this often (0: never; `manage.py journal_retain` by hand). A keep of 0
# keeps the journal for good. What the guards need for good (which objects have a standing once-only
# effect, with its evidence) is never dropped. Width, ahead and keep are written to the database by
# `migrate`, as the tables' owner: the app's role cannot shorten the keep.
JOURNAL_PARTITION_SECONDS = _retention.seconds(
    "JOURNAL_PARTITION_SECONDS",
    7 * 24 * 3600.0,
    'How wide each new range of the journal is ("Retention"); written to the database by '
    "`migrate`. A range made before keeps its width.",
    shown="`604800` (a week)",
)
JOURNAL_PARTITIONS_AHEAD = _retention.integer(
    "JOURNAL_PARTITIONS_AHEAD", 4, "How many ranges are made ahead of now."
)
JOURNAL_RETAIN_SECONDS = _retention.seconds(
    "JOURNAL_RETAIN_SECONDS",
    90 * 24 * 3600.0,
    "How long a range is kept after it ends, and after anything last happened to its tasks, "
    "before it may be dropped; `0`: kept for good. Written by `migrate`, as the tables' owner.",
    shown="`7776000` (90 days)",
)
JOURNAL_RETENTION_INTERVAL_SECONDS = _retention.seconds(
    "JOURNAL_RETENTION_INTERVAL_SECONDS",
    24 * 3600.0,
    "How often the sweeper rings for the retention job; `0`: only by hand "
    "(`manage.py journal_retain`).",
    shown="`86400` (tests: `0`)",
)
# Where the job writes each range before it drops it (journal-<range>.jsonl.gz), if anywhere.
JOURNAL_ARCHIVE_DIR = _retention.text(
    "JOURNAL_ARCHIVE_DIR",
    "",
    "Where the retention job writes each range (`journal-<range>.jsonl.gz`, one JSON object a "
    "row) before it drops it; empty: not archived.",
    kind="path",
)

# The MCP server (agentops/mcp, `manage.py mcp_server`). How long an intent's call waits for its
# task to settle the effect before it answers with what is known (unknown, and being checked).
MCP_WAIT_SECONDS = _mcp.seconds(
    "MCP_WAIT_SECONDS",
    10.0,
    "How long an intent's call waits for its task to settle the effect before it answers "
    "with what is known (unknown, and being checked).",
)
MCP_CLIENT = _mcp.text(
    "MCP_CLIENT",
    "",
    "On stdio, the API client (with the `mcp` scope) every call is made as, unless "
    "`--client` names one.",
)
MCP_HOST = _mcp.text(
    "MCP_HOST",
    "127.0.0.1",
    "Streamable HTTP: the address the server listens on, unless `--host` names one.",
)
MCP_PORT = _mcp.integer(
    "MCP_PORT", 8765, "Streamable HTTP: the port the server listens on, unless `--port` names one."
)

# A client's X-Forwarded-Proto is believed only when an operator says a proxy is in front
# (one that sets the header itself and drops what clients send). The gunicorn settings
# (agentops/gunicorn_conf.py) read the same variable.
BEHIND_PROXY = shared_settings.behind_proxy()
if BEHIND_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Off only for `make run`, which serves plain HTTP on this machine's loopback.
HTTPS = _web.flag(
    "DJANGO_HTTPS",
    True,
    "With debug off: HTTPS redirect, HSTS and secure-only cookies. Off serves plain HTTP and "
    "is allowed only when every allowed host is loopback.",
    shown="on (`make run`: off)",
)
LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "[::1]"}
# Read whatever the mode, so both are declared (agentops/conf.py); used only in production.
_ssl_redirect = _web.flag(
    "DJANGO_SECURE_SSL_REDIRECT", True, "With debug off and HTTPS on: redirect HTTP to HTTPS."
)
_hsts_seconds = _web.integer(
    "DJANGO_HSTS_SECONDS", 31536000, "With debug off and HTTPS on: HSTS max-age."
)
if not DEBUG and HTTPS:
    # Production: `manage.py check --deploy` is clean with these.
    SECURE_SSL_REDIRECT = _ssl_redirect
    SECURE_HSTS_SECONDS = _hsts_seconds
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
LOG_FORMAT = shared_settings.log_format()
LOG_LEVEL = shared_settings.log_level()
# Which code this process runs (agentops/version.py): on the lease of every task it runs and
# in /metrics, so that a rolling deploy's two versions can be told apart.
AGENTOPS_VERSION = running_version()
try:
    LOGGING = logging_config(fmt=LOG_FORMAT, level=LOG_LEVEL)
except LogFormatRefused as refused:
    raise ImproperlyConfigured(str(refused)) from None

# Metrics (agentops/telemetry): /metrics is served without a token only to these addresses or
# networks (as agentops.access.client_ip sees the caller); anyone else needs an API client's
# token with the scope metrics:read. PROMETHEUS_MULTIPROC_DIR, read by prometheus_client
# itself, must be set in the environment of every process (docs/operating/metrics.md).
METRICS_ALLOWED_ADDRESSES = _logs.names(
    "METRICS_ALLOWED_ADDRESSES",
    ("127.0.0.1", "::1"),
    "Comma-separated addresses or networks (`10.0.0.0/8`) `/metrics` is served to without a "
    "token, as the caller's address is seen (behind `DJANGO_BEHIND_PROXY`, the one the proxy "
    "saw). Anyone else needs an API client's token with the scope `metrics:read`.",
)
try:
    METRICS_ALLOWED_NETWORKS = [ip_network(a, strict=False) for a in METRICS_ALLOWED_ADDRESSES]
except ValueError as bad:
    raise ImproperlyConfigured(f"METRICS_ALLOWED_ADDRESSES: {bad}") from None
# Where people open the operators' pages (https://ops.example.com): the alerts link there
# (exposed as agentops_info{base_url}).
AGENTOPS_BASE_URL = _logs.text(
    "AGENTOPS_BASE_URL",
    "",
    "Where people open the operators' pages (`https://ops.example.com`): the alerts' links, "
    "through `agentops_info{base_url}`.",
    shown="empty (`make run`: its address)",
    kind="url",
).rstrip("/")
# PROMETHEUS_MULTIPROC_DIR is read by prometheus-client itself (and by gunicorn's child_exit
# and the metrics' check): declared with what it means, though no setting holds it.
shared_settings.metrics_dir()
