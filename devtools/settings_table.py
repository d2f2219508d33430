"""The settings page (docs/settings.md), written from the code's declarations (agentops/conf.py).

``python -m devtools.settings_table --write docs/settings.md`` writes it;
``python -m devtools.settings_table --check docs/settings.md`` exits 1 when the page differs
from what the declarations say (tests/test_settings_table.py runs it).

The declarations are those made by what every process of agentops loads: Django's settings
and its apps (their tools' settings included, with the example app installed), gunicorn's
configuration and the MCP server's command. They are read in an environment of this module's
own (:data:`ENVIRONMENT`), so the page does not depend on the shell that writes it.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from agentops import conf
from agentops.conf import Setting

PAGE = Path("docs/settings.md")
KEPT = ("PATH", "HOME", "PYTHONPATH", "LANG", "LC_ALL", "TMPDIR", "VIRTUAL_ENV", "SYSTEMROOT")
"""What this process keeps of its own environment: none of it is one of agentops' settings."""
ENVIRONMENT = {
    "DJANGO_SETTINGS_MODULE": "agentops.settings",
    "DJANGO_DEBUG": "1",
    "DATABASE_URL": "postgres://settings-table@127.0.0.1:1/settings-table",
    "AGENTOPS_EXAMPLES": "1",
}
"""Enough for the settings to load (nothing is connected to), the example app installed."""
LOADED = ("agentops.gunicorn_conf", "agentops.management.commands.mcp_server")
"""What processes other than Django's load, besides Django's settings and apps."""

INTRO = """\
# Settings

Everything agentops reads is read from the environment: each process (the web server, the
workers, the sweeper, the MCP server, `manage.py`) reads the variables below when it starts,
and nothing else configures it. A tool's own settings may also be given as Django settings of
the same name.

Each variable is declared where the code reads it, with its default and meaning
(`agentops/conf.py`), and this page is written from those declarations
(`python -m devtools.settings_table --write docs/settings.md`): a test fails when it is out of
date, or when the code reads a variable that is not declared. Defaults suit the demo
(`make run`), which starts PostgreSQL, Redis and the sandbox providers and points the
variables at them.
"""


def declarations() -> list[Setting]:
    """Every declared setting, after loading what agentops' processes load (in this process:
    its environment is replaced by :data:`ENVIRONMENT` first)."""
    kept = {name: os.environ[name] for name in KEPT if name in os.environ}
    os.environ.clear()
    os.environ.update(kept)
    os.environ.update(ENVIRONMENT)
    import django

    django.setup()
    for module in LOADED:
        importlib.import_module(module)
    tooling_declare()
    return list(conf.declared.values())


TOOLING = conf.Section("The launcher and the development tools")


def tooling_declare() -> None:
    """The variables the launcher (devtools/stack: `make run`, `make test`, `stack.py`), the
    chaos run and the sandbox providers read. None is shipped, and each reads its environment
    itself, without Django's settings (the sandboxes know nothing of agentops): they are
    declared here instead, and tests/test_settings_table.py checks that every ``AGENTOPS_…``
    and ``SANDBOX_…`` name in their sources is."""
    from agentops.effects._registry import registry

    for name, default, meaning in (
        (
            "AGENTOPS_SERVER_USER",
            "nobody",
            "Run as root: the existing unprivileged user the embedded PostgreSQL and Redis "
            "and the sandbox providers run as.",
        ),
        (
            "AGENTOPS_APP_USER",
            "www-data",
            "Run as root: the existing unprivileged user the app runs as (gunicorn, the "
            "worker, the sweeper, the `manage.py` commands `make run` and `stack.py manage` "
            "start). Refused if it is root or `AGENTOPS_SERVER_USER`.",
        ),
    ):
        TOOLING.setting(name, "text", default, meaning, None)
    for name, port, meaning in (
        ("AGENTOPS_PG_PORT", 54329, "`make run`: port of the embedded PostgreSQL."),
        ("AGENTOPS_REDIS_PORT", 63799, "`make run`: port of the embedded Redis."),
        (
            "AGENTOPS_WEB_PORT",
            8000,
            "`make run`: port of the web server. `make run` writes the ports it used (these "
            "and the sandboxes') to `var/run/stack.json`, where `stack.py manage` finds them: "
            "set them for `manage` only to override.",
        ),
    ):
        TOOLING.setting(name, "integer", port, meaning, None)
    for sandbox in registry.sandboxes.values():
        TOOLING.setting(
            sandbox.port_setting or f"AGENTOPS_SANDBOX_{sandbox.name.upper()}_PORT",
            "integer",
            sandbox.port,
            f"`make run`: port of the {sandbox.name} sandbox provider (`{sandbox.module}`), "
            f"started when `{sandbox.unless}` is unset.",
            None,
        )
    TOOLING.setting(
        "SANDBOX_WEBHOOK_SECRET",
        "secret",
        "",
        "Read by a sandbox provider (`sandbox.payments`): the secret it signs what it posts "
        "back to the app with; the launcher makes one for each run and gives the app the same.",
        "set by the launcher",
    )
    TOOLING.setting(
        "AGENTOPS_STACK_CONTROL",
        "path",
        "",
        "The control socket through which the command `stack.py test` or `chaos` runs may "
        "restart the PostgreSQL and Redis it started.",
        "set by the launcher",
    )
    TOOLING.setting(
        "AGENTOPS_TEST_SHARD",
        "text",
        "",
        "`I/N`: this pytest runs the test files the split gives shard I of N "
        "(`tests/sharding.py`), and the others' are deselected.",
        "set by `stack.py test --shards N`",
    )
    TOOLING.setting(
        "AGENTOPS_TEST_DURATIONS",
        "path",
        "",
        "A file this pytest run adds the seconds each test file took to, merged with what "
        "it holds (`tests/durations.json` is the record the shards are balanced by).",
        "unset: nothing recorded",
    )
    TOOLING.setting(
        "AGENTOPS_CHAOS_KILL",
        "text",
        "",
        "Read by `devtools.chaos.kill.dying` only (so only where `AGENTOPS_TOOL_WRAPPERS` "
        "names it): `before_call:charge_customer` (or `during_call`, `after_call`) makes a "
        "worker SIGKILL itself at its first call of that tool.",
        None,
    )
    TOOLING.setting(
        "AGENTOPS_PAUSE_AT",
        "text",
        "",
        "Read by `devtools.cluster.pause.pausing` only (so only where `AGENTOPS_TOOL_WRAPPERS` "
        "names it): `charge_customer:DIR` holds a worker's first call of that tool, once its "
        "step is committed, until `DIR/go` exists.",
        None,
    )
    TOOLING.setting(
        "AGENTOPS_CHAOS_MODEL",
        "text",
        "",
        "Read by the chaos run's model only (`devtools.chaos.model`: its planner wrapper, and "
        "the naive loop): the seed and slip rate of the model, as JSON. Set by the run for "
        "its workers.",
        None,
    )
    TOOLING.setting(
        "AGENTOPS_CHAOS_NAIVE_DIR",
        "path",
        "",
        "The chaos run's naive harness only: where its workers "
        "(`devtools.chaos.naive.NaiveWorker`, the only ones that run its job) write what each "
        "naive task did.",
        None,
    )


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def page(settings: Iterable[Setting]) -> str:
    """The page: the introduction, then a table of each group's variables, groups in the
    order they are first read, variables in the order they are declared."""
    groups: dict[str, list[Setting]] = {}
    for setting in settings:
        groups.setdefault(setting.group, []).append(setting)
    lines = [INTRO]
    for group, members in groups.items():
        lines += [f"## {group}", "", "| Variable | Default | Meaning |", "| --- | --- | --- |"]
        lines += [f"| `{s.name}` | {_cell(s.shown)} | {_cell(s.meaning)} |" for s in members]
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.settings_table", description=__doc__)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", metavar="PAGE", type=Path, help="write the page")
    action.add_argument("--check", metavar="PAGE", type=Path, help="exit 1 if it differs")
    args = parser.parse_args(argv)
    wanted = page(declarations())
    if args.write:
        args.write.write_text(wanted)
        print(f"wrote {args.write}")
        return 0
    found = args.check.read_text() if args.check.exists() else ""
    if found == wanted:
        return 0
    sys.stdout.writelines(
        difflib.unified_diff(
            found.splitlines(keepends=True),
            wanted.splitlines(keepends=True),
            fromfile=str(args.check),
            tofile="the declarations",
        )
    )
    print(
        f"{args.check} is not what the declarations say: "
        f"python -m devtools.settings_table --write {args.check}",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
