"""gunicorn's settings: ``gunicorn -c python:agentops.gunicorn_conf agentops.wsgi``.

`make run` serves the app this way on 127.0.0.1. gunicorn by default believes
``X-Forwarded-Proto: https`` from any client on loopback; here it believes it only with
``DJANGO_BEHIND_PROXY`` set (as Django's settings do), and then only from
``FORWARDED_ALLOW_IPS`` (default: loopback, where such a proxy would connect from).
"""

from __future__ import annotations

from typing import Any

from agentops import shared_settings
from agentops.logs import gunicorn_config

_web = shared_settings.WEB
_behind_proxy = shared_settings.behind_proxy()

wsgi_app = "agentops.wsgi:application"
bind = _web.text(
    "GUNICORN_BIND",
    "127.0.0.1:8000",
    "The address gunicorn listens on (`agentops/gunicorn_conf.py`).",
)
# Two cores here; WEB_CONCURRENCY is gunicorn's usual knob for more.
workers = _web.integer("WEB_CONCURRENCY", 2, "gunicorn worker processes.")
accesslog = "-"
_forwarded_allow_ips = _web.text(
    "FORWARDED_ALLOW_IPS",
    "127.0.0.1,::1",
    "With `DJANGO_BEHIND_PROXY`: the proxy addresses gunicorn accepts forwarded headers from.",
)
forwarded_allow_ips = _forwarded_allow_ips if _behind_proxy else ""
secure_scheme_headers = {"X-FORWARDED-PROTO": "https"} if _behind_proxy else {}
# gunicorn's runtime control socket would live in the user's home directory: not wanted.
control_socket_disable = True
# gunicorn's own lines (its error log, the access log) in the app's format: one JSON object
# per line, or text under `make run` (LOG_FORMAT, agentops/logs.py).
logconfig_dict = gunicorn_config(
    fmt=shared_settings.log_format(), level=shared_settings.log_level()
)


def child_exit(server: Any, worker: Any) -> None:
    """A web worker that ended leaves its metrics files in PROMETHEUS_MULTIPROC_DIR: its
    counters still count; its live gauges must go (prometheus_client's multiprocess mode)."""
    if shared_settings.metrics_dir():
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]
