"""A system check: in production, metrics in multiprocess mode (docs/operating/metrics.md)."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Warning, register

from agentops import shared_settings


@register()
def metrics_multiprocess(**kwargs: Any) -> list[CheckMessage]:
    path = shared_settings.metrics_dir()
    if settings.DEBUG:
        return []
    if not path:
        return [
            Warning(
                "PROMETHEUS_MULTIPROC_DIR is not set: each gunicorn worker and RQ worker keeps "
                "its counters to itself, and /metrics shows only those of the process that "
                "answers it",
                hint="set it to an empty directory (emptied before every start) in the "
                "environment of the web server, the workers and the sweeper of a machine",
                id="agentops.W301",
            )
        ]
    if not os.path.isdir(path):
        return [
            Warning(
                f"PROMETHEUS_MULTIPROC_DIR={path} is not a directory: /metrics will fail",
                id="agentops.W302",
            )
        ]
    return []
