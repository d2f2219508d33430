"""How every agentops process logs: one JSON object per line, or text for a person's terminal.

The web server (gunicorn's own loggers too: agentops/gunicorn_conf.py), the workers and the
sweeper all log through :func:`logging_config`. ``LOG_FORMAT=json`` (the default, production)
writes each record as one JSON object (python-json-logger): its time, level, logger and
message, and whatever the code passed as ``extra`` — for a line about a step, ``task_id``,
``step_key``, ``tool`` and ``state`` (agentops/telemetry/steps.py), so that a search for a
task or a key finds every line about it, from any process. ``LOG_FORMAT=text`` is for
``make run``'s terminal: one readable line, the same message.

Nothing here imports Django: gunicorn's configuration reads it before the app is loaded.
"""

from __future__ import annotations

from typing import Any

FORMATS = ("json", "text")

# The fields a JSON line carries besides ``extra``: renamed to short, common names.
JSON_FIELDS = "%(asctime)s %(levelname)s %(name)s %(process)d %(message)s"
JSON_RENAMES = {"asctime": "time", "levelname": "level", "name": "logger", "process": "pid"}
TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


class LogFormatRefused(ValueError):
    """LOG_FORMAT names no format this module knows."""


def formatter(fmt: str) -> dict[str, Any]:
    """The ``logging.config`` formatter for ``fmt`` (``json`` or ``text``)."""
    if fmt == "json":
        return {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": JSON_FIELDS,
            "rename_fields": JSON_RENAMES,
            # ISO 8601 with the zone: lines from several machines sort and join.
            "datefmt": "%Y-%m-%dT%H:%M:%S%z",
        }
    if fmt == "text":
        return {"format": TEXT_FORMAT, "datefmt": "%H:%M:%S"}
    raise LogFormatRefused(f"LOG_FORMAT must be one of {', '.join(FORMATS)}, not {fmt!r}")


def logging_config(*, fmt: str, level: str) -> dict[str, Any]:
    """Django's LOGGING: every record to standard error, formatted as ``fmt``."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"agentops": formatter(fmt)},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "agentops"}},
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            # The stripe library logs every request at INFO; the journal records what matters.
            "stripe": {"level": "WARNING"},
            # RQ adds a handler of its own (coloured text) unless one is found above it.
            "rq": {"level": level},
        },
    }


def gunicorn_config(*, fmt: str, level: str) -> dict[str, Any]:
    """gunicorn's ``logconfig_dict``: its error and access logs in the same format. gunicorn
    replaces its defaults section by section, so every section is given."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"agentops": formatter(fmt)},
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": "agentops",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            "gunicorn.error": {"level": level, "handlers": ["console"], "propagate": False},
            "gunicorn.access": {"level": "INFO", "handlers": ["console"], "propagate": False},
        },
    }
