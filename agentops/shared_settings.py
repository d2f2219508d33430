"""The variables more than one configuration reads: Django's settings (agentops/settings.py),
gunicorn's (agentops/gunicorn_conf.py) and the metrics' (agentops/telemetry). Declared once
here (agentops/conf.py), read by each; nothing here imports Django's settings."""

from __future__ import annotations

from agentops.conf import Section

WEB = Section("Django and the web server")
LOGS = Section("Logs and metrics")
TOOLS = Section("Tools and their providers")


def behind_proxy() -> bool:
    return WEB.flag(
        "DJANGO_BEHIND_PROXY",
        False,
        "A proxy that terminates TLS is in front: believe its `X-Forwarded-Proto` (Django and "
        "gunicorn) and count failed logins by the last `X-Forwarded-For` hop.",
    )


def log_format() -> str:
    return LOGS.text(
        "LOG_FORMAT",
        "json",
        "`json`: every process (gunicorn's own logs included) writes one JSON object per line, "
        "a line about a step with its `task_id`, `step_key`, `tool` and `state`; `text`: one "
        "readable line, for a terminal.",
        shown="`json` (`make run`: `text`)",
        blank_is_default=True,
    )


def log_level() -> str:
    return LOGS.text(
        "LOG_LEVEL",
        "INFO",
        "Root log level, RQ's worker lines included (`WARNING` leaves out a line a job taken "
        "and a job done).",
        blank_is_default=True,
    )


def metrics_dir() -> str:
    """PROMETHEUS_MULTIPROC_DIR, which prometheus-client reads itself when first imported."""
    return LOGS.text(
        "PROMETHEUS_MULTIPROC_DIR",
        "",
        "Read by prometheus-client itself: a directory, emptied before every start and shared "
        "by the web server, the workers and the sweeper of one machine, where each process "
        "keeps its metrics for `/metrics` to add up. Unset, each process's counters stay its "
        "own (`manage.py check` warns).",
        shown="`make run`: `var/prometheus`; `make test`: one per run",
        kind="path",
    )
